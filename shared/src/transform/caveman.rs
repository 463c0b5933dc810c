// TEMPORARY STUB (replaced by the real module)
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Lite,
    Full,
    Ultra,
}
impl Level {
    pub fn from_depth(d: u8) -> Option<Level> {
        match d {
            1 => Some(Level::Lite),
            2 => Some(Level::Full),
            3 => Some(Level::Ultra),
            _ => None,
        }
    }
    pub fn depth(self) -> u8 {
        self as u8 + 1
    }
}
pub fn compress(text: &str, _level: Level) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
pub fn depth_for(position: usize, count: usize) -> u8 {
    let f = position as f64 / count.max(1) as f64;
    if f < 0.2 {
        3
    } else if f < 0.4 {
        2
    } else if f < 0.6 {
        1
    } else {
        0
    }
}
