//! Files a repository told mc to read or write (team memory, the project
//! config, the project docs, files a memory names): only inside the
//! repository.
//!
//! A repository is untrusted input, and a symbolic link in it can point
//! anywhere. So every path here is a list of plain names below a root (no
//! `..`, no absolute part), and each name is opened relative to the folder
//! before it with `O_NOFOLLOW`: a symbolic link anywhere on the way — the
//! file, a folder, even one that points back inside the repository — is
//! refused, never followed. The root itself is the user's choice and is
//! opened as given. Checking and opening are one step (`openat`), so a link
//! swapped in between cannot redirect the read.
//!
//! A write goes to a temporary file in the checked folder, then is renamed
//! over the target; a target that is a symbolic link or not a regular file
//! is refused. (Should the target become a link between that check and the
//! rename, the rename replaces the link itself: nothing outside is written.)

use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

/// Why a repository file was not read or written.
#[derive(Debug)]
pub enum Refusal {
    /// The path, or a folder on the way to it, is a symbolic link.
    Symlink(PathBuf),
    /// The path leaves its root (`..`, an absolute part).
    Outside(PathBuf),
    /// Not a folder where one is needed, or not a regular file.
    NotDir(PathBuf),
    NotFile(PathBuf),
    /// Larger than the reader's limit: the limit and the size (bytes).
    TooLarge(PathBuf, u64, u64),
    Io(PathBuf, io::Error),
}

impl Refusal {
    pub fn path(&self) -> &Path {
        match self {
            Refusal::Symlink(p)
            | Refusal::Outside(p)
            | Refusal::NotDir(p)
            | Refusal::NotFile(p)
            | Refusal::TooLarge(p, _, _)
            | Refusal::Io(p, _) => p,
        }
    }

    /// The problem without the path.
    pub fn reason(&self) -> String {
        match self {
            Refusal::Symlink(_) => "is a symbolic link; mc follows no link in a repository \
                                    (it could point outside it)"
                .into(),
            Refusal::Outside(_) => "leaves the repository".into(),
            Refusal::NotDir(_) => "is not a folder".into(),
            Refusal::NotFile(_) => "is not a regular file".into(),
            Refusal::TooLarge(_, max, _) => format!("is larger than {} KiB", max / 1024),
            Refusal::Io(_, e) => format!("cannot be used: {e}"),
        }
    }

    /// Whether the path is a link or leaves the root (what the rule refuses,
    /// as opposed to an ordinary I/O problem).
    pub fn is_escape(&self) -> bool {
        matches!(self, Refusal::Symlink(_) | Refusal::Outside(_))
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.path().display(), self.reason())
    }
}

/// A folder inside a repository, opened with no link on the way.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

/// The plain names of `rel`, or `Outside`.
fn names<'a>(root: &Path, rel: &'a Path) -> Result<Vec<&'a std::ffi::OsStr>, Refusal> {
    rel.components()
        .map(|c| match c {
            Component::Normal(name) => Ok(name),
            _ => Err(Refusal::Outside(root.join(rel))),
        })
        .collect()
}

/// What is at `name` in `dir`, not following a link (for error messages).
fn classify(dir: &OwnedFd, name: &std::ffi::OsStr, path: PathBuf, want_dir: bool) -> Refusal {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if FileType::from_raw_mode(st.st_mode).is_symlink() => Refusal::Symlink(path),
        Ok(_) if want_dir => Refusal::NotDir(path),
        Ok(_) => Refusal::NotFile(path),
        Err(e) => Refusal::Io(path, e.into()),
    }
}

impl Dir {
    /// The folder `root/rel`, each part of `rel` opened without following a
    /// link. `Ok(None)` when a part does not exist, unless `create`, which
    /// makes the missing folders (as `mkdir -p` would, but never through a
    /// link).
    pub fn open(root: &Path, rel: &Path, create: bool) -> Result<Option<Dir>, Refusal> {
        let parts = names(root, rel)?;
        let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let mut fd = match rustix::fs::open(root, dir_flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(Refusal::Io(root.to_path_buf(), e.into())),
        };
        let mut path = root.to_path_buf();
        for name in parts {
            path.push(name);
            let flags = dir_flags | OFlags::NOFOLLOW;
            let next = match rustix::fs::openat(&fd, name, flags, Mode::empty()) {
                Err(Errno::NOENT) if create => {
                    match rustix::fs::mkdirat(&fd, name, Mode::from_raw_mode(0o777)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(Refusal::Io(path, e.into())),
                    }
                    rustix::fs::openat(&fd, name, flags, Mode::empty())
                }
                other => other,
            };
            fd = match next {
                Ok(next) => next,
                Err(Errno::NOENT) => return Ok(None),
                Err(Errno::LOOP | Errno::NOTDIR | Errno::MLINK) => {
                    return Err(classify(&fd, name, path, true));
                }
                Err(e) => return Err(Refusal::Io(path, e.into())),
            };
        }
        Ok(Some(Dir { fd, path }))
    }

    /// The folder's path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The bytes of the regular file `name` in this folder, at most `max`
    /// of them; `Ok(None)` when it does not exist. A link, a FIFO, a
    /// device or a folder is refused without blocking on it.
    pub fn read(&self, name: &str, max: u64) -> Result<Option<Vec<u8>>, Refusal> {
        let path = self.path.join(name);
        if names(&self.path, Path::new(name))?.len() != 1 {
            return Err(Refusal::Outside(path));
        }
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(&self.fd, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP | Errno::MLINK) => {
                return Err(classify(&self.fd, name.as_ref(), path, false));
            }
            Err(e) => return Err(Refusal::Io(path, e.into())),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| Refusal::Io(path.clone(), e.into()))?;
        if !FileType::from_raw_mode(st.st_mode).is_file() {
            return Err(Refusal::NotFile(path));
        }
        let size = u64::try_from(st.st_size).unwrap_or(u64::MAX);
        if size > max {
            return Err(Refusal::TooLarge(path, max, size));
        }
        let mut bytes = Vec::new();
        File::from(fd)
            .take(max.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| Refusal::Io(path.clone(), e))?;
        if bytes.len() as u64 > max {
            return Err(Refusal::TooLarge(path, max, bytes.len() as u64));
        }
        Ok(Some(bytes))
    }

    /// Replace (or create) the regular file `name` in this folder with
    /// `bytes`: through `.<name>.tmp` and a rename. A `name` that is a link
    /// or not a regular file is refused and left as it is.
    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<(), Refusal> {
        let path = self.path.join(name);
        if names(&self.path, Path::new(name))?.len() != 1 {
            return Err(Refusal::Outside(path));
        }
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => {
                let kind = FileType::from_raw_mode(st.st_mode);
                if kind.is_symlink() {
                    return Err(Refusal::Symlink(path));
                }
                if !kind.is_file() {
                    return Err(Refusal::NotFile(path));
                }
            }
            Err(Errno::NOENT) => {}
            Err(e) => return Err(Refusal::Io(path, e.into())),
        }
        let temp = format!(".{name}.tmp");
        let temp_path = self.path.join(&temp);
        let io = |p: &PathBuf| {
            let p = p.clone();
            move |e: Errno| Refusal::Io(p, e.into())
        };
        // A leftover temp (or a link a repository put there) goes first: unlinking
        // a link removes the link, never its target.
        match rustix::fs::unlinkat(&self.fd, temp.as_str(), AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(e) => return Err(io(&temp_path)(e)),
        }
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, temp.as_str(), flags, Mode::from_raw_mode(0o666))
            .map_err(io(&temp_path))?;
        let mut file = File::from(fd);
        if let Err(e) = file.write_all(bytes) {
            let _ = rustix::fs::unlinkat(&self.fd, temp.as_str(), AtFlags::empty());
            return Err(Refusal::Io(temp_path, e));
        }
        drop(file);
        rustix::fs::renameat(&self.fd, temp.as_str(), &self.fd, name).map_err(io(&path))
    }
}

/// The regular file `root/rel`, read with no link followed on the way (see
/// the module docs); `Ok(None)` when it or a folder on the way is missing.
pub fn read(root: &Path, rel: &Path, max: u64) -> Result<Option<Vec<u8>>, Refusal> {
    let parts = names(root, rel)?;
    let Some((file, folders)) = parts.split_last() else {
        return Err(Refusal::NotFile(root.to_path_buf()));
    };
    let folder: PathBuf = folders.iter().collect();
    let Some(dir) = Dir::open(root, &folder, false)? else {
        return Ok(None);
    };
    let Some(name) = file.to_str() else {
        return Err(Refusal::NotFile(root.join(rel)));
    };
    dir.read(name, max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A repository with a real `.mc/memory/A.md`, and an outside folder
    /// holding `secret.md`.
    fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(repo.join(".mc/memory")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(repo.join(".mc/memory/A.md"), "inside").unwrap();
        std::fs::write(outside.join("secret.md"), "outside text").unwrap();
        (tmp, repo, outside)
    }

    fn refused_as_link(r: Result<Option<Vec<u8>>, Refusal>, at: &Path) {
        match r {
            Err(Refusal::Symlink(p)) => assert_eq!(p, at),
            other => panic!("expected a link refusal at {}, got {other:?}", at.display()),
        }
    }

    #[test]
    fn reads_plain_files_and_reports_missing_ones() {
        let (_tmp, repo, _) = setup();
        let got = read(&repo, Path::new(".mc/memory/A.md"), 100).unwrap();
        assert_eq!(got.as_deref(), Some(&b"inside"[..]));
        assert!(
            read(&repo, Path::new(".mc/memory/B.md"), 100)
                .unwrap()
                .is_none()
        );
        assert!(read(&repo, Path::new("nope/B.md"), 100).unwrap().is_none());
        assert!(
            read(&repo.join("gone"), Path::new("B.md"), 100)
                .unwrap()
                .is_none()
        );
        assert!(matches!(
            read(&repo, Path::new(".mc/memory/A.md"), 3),
            Err(Refusal::TooLarge(_, 3, 6))
        ));
        assert!(matches!(
            read(&repo, Path::new("../outside/secret.md"), 100),
            Err(Refusal::Outside(_))
        ));
        assert!(matches!(
            read(&repo, Path::new(".mc"), 100),
            Err(Refusal::NotFile(_))
        ));
    }

    #[test]
    fn no_link_is_followed_in_any_place() {
        let (_tmp, repo, outside) = setup();
        // The file itself.
        symlink(outside.join("secret.md"), repo.join(".mc/memory/B.md")).unwrap();
        refused_as_link(
            read(&repo, Path::new(".mc/memory/B.md"), 100),
            &repo.join(".mc/memory/B.md"),
        );
        // A link to a place inside the repository is refused too.
        symlink("A.md", repo.join(".mc/memory/C.md")).unwrap();
        refused_as_link(
            read(&repo, Path::new(".mc/memory/C.md"), 100),
            &repo.join(".mc/memory/C.md"),
        );
        // A folder on the way, and a relative link through `..`.
        std::fs::create_dir_all(repo.join("x")).unwrap();
        symlink(&outside, repo.join("x/memory")).unwrap();
        refused_as_link(
            read(&repo, Path::new("x/memory/secret.md"), 100),
            &repo.join("x/memory"),
        );
        symlink("../outside", repo.join("up")).unwrap();
        refused_as_link(
            read(&repo, Path::new("up/secret.md"), 100),
            &repo.join("up"),
        );
        // Writing refuses the same links, and leaves their targets alone.
        let dir = Dir::open(&repo, Path::new(".mc/memory"), false)
            .unwrap()
            .unwrap();
        assert!(matches!(
            dir.write("B.md", b"new"),
            Err(Refusal::Symlink(_))
        ));
        assert!(
            std::fs::symlink_metadata(repo.join(".mc/memory/B.md"))
                .unwrap()
                .is_symlink()
        );
        assert_eq!(
            std::fs::read(outside.join("secret.md")).unwrap(),
            b"outside text"
        );
        assert!(matches!(
            Dir::open(&repo, Path::new("up/new"), true),
            Err(Refusal::Symlink(_))
        ));
        assert!(!outside.join("new").exists());
    }

    #[test]
    fn writes_replace_through_a_temp_file_and_make_folders() {
        let (_tmp, repo, _) = setup();
        let dir = Dir::open(&repo, Path::new("a/b"), true).unwrap().unwrap();
        dir.write("X.md", b"one").unwrap();
        dir.write("X.md", b"two").unwrap();
        assert_eq!(std::fs::read(repo.join("a/b/X.md")).unwrap(), b"two");
        assert!(!repo.join("a/b/.X.md.tmp").exists());
        // A link left at the temp name is removed, not written through.
        let target = repo.join("target");
        std::fs::write(&target, "keep").unwrap();
        symlink(&target, repo.join("a/b/.X.md.tmp")).unwrap();
        dir.write("X.md", b"three").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        assert_eq!(std::fs::read(repo.join("a/b/X.md")).unwrap(), b"three");
    }
}
