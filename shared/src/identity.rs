// TEMPORARY STUB (replaced by the real module)
pub fn project_identity(dir: &std::path::Path) -> String {
    format!("dir:{}", dir.display())
}
