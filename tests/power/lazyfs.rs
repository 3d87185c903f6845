//! `LazyFs`: a FUSE file system that loses what was not synced, in the spirit of Jepsen's
//! LazyFS. It passes every call through to a backing folder, except file contents: each file's
//! bytes live in memory from its first read or write, and only `fsync`/`fdatasync` of the file
//! writes them (the ranges written since, and the length) to the backing file. `cut` is the
//! power cut: every write not synced since is dropped (and, torn, the first part of each
//! file's last unsynced write reaches the disk), the memory is cleared, and from then on every
//! call fails with `EIO` until the mount is replaced.
//!
//! What is durable at once and what only at a sync (docs/decisions.md, "Power loss"): names
//! (create, mkdir, rename, unlink, rmdir) and permissions go to the backing folder at once,
//! as on a file system mounted `dirsync`; a file's contents and its length (a `set_len`, a
//! write past the end) only at a sync of that file. A new file that was never synced is
//! therefore there after a cut, empty.
//!
//! Mounted through `fusermount3` (Debian's `fuse3`) by the `fuser` crate, no libfuse; a mount
//! that fails (no `/dev/fuse`, no `fusermount3`) fails the test saying so.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use fuser::{
    BackgroundSession, Config, Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation,
    INodeNo, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};

/// How long the kernel may keep names and attributes: short, and a cut replaces the mount.
const TTL: Duration = Duration::from_secs(1);
/// A page, for torn writes that keep half of one.
const PAGE: usize = 4096;

/// How a cut treats the writes not synced yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// Every one is lost.
    Drop,
    /// Every one is lost, except the first half of each file's last unsynced write.
    TornHalf,
    /// Every one is lost, except the first half page of each file's last unsynced write.
    TornHalfPage,
}

/// What one cut threw away.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lost {
    /// Bytes written and never synced that did not reach the disk.
    pub bytes: u64,
    /// Files whose unsynced length change (growth or truncation) was lost.
    pub lengths: u64,
    /// Bytes of torn writes that did reach the disk.
    pub torn_kept: u64,
}

/// One file's contents as the running programs see them, and what of it is not synced.
#[derive(Default)]
struct Contents {
    bytes: Vec<u8>,
    /// Writes since the last sync, in order: (offset, length).
    unsynced: Vec<(u64, usize)>,
    /// The backing file's length (what a cut leaves).
    synced_len: u64,
}

#[derive(Default)]
struct State {
    /// Inode -> path relative to the backing folder; the root is "".
    paths: HashMap<u64, PathBuf>,
    inodes: HashMap<PathBuf, u64>,
    next_ino: u64,
    files: HashMap<u64, Contents>,
    /// After a cut every call fails: the power is off.
    off: bool,
}

/// The shared handle: the test cuts through it while the mount serves through it.
#[derive(Clone)]
pub struct Disk {
    backing: PathBuf,
    state: Arc<Mutex<State>>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

fn errno(e: std::io::Error) -> Errno {
    Errno::from(e)
}

impl Disk {
    fn new(backing: &Path) -> Self {
        let mut state = State {
            next_ino: 2,
            ..State::default()
        };
        state.paths.insert(INodeNo::ROOT.0, PathBuf::new());
        state.inodes.insert(PathBuf::new(), INodeNo::ROOT.0);
        Self {
            backing: backing.to_path_buf(),
            state: Arc::new(Mutex::new(state)),
        }
    }

    /// Cuts the power: drops what was not synced (see `Cut`) and turns the disk off.
    pub fn cut(&self, how: Cut) -> Lost {
        let mut state = lock(&self.state);
        state.off = true;
        let mut lost = Lost::default();
        let paths = state.paths.clone();
        for (ino, contents) in state.files.drain() {
            let written: u64 = contents.unsynced.iter().map(|&(_, n)| n as u64).sum();
            lost.bytes += written;
            lost.lengths += u64::from(contents.bytes.len() as u64 != contents.synced_len);
            let keep = match (how, contents.unsynced.last()) {
                (Cut::Drop, _) | (_, None) => None,
                (Cut::TornHalf, Some(&(offset, n))) => Some((offset, n / 2)),
                (Cut::TornHalfPage, Some(&(offset, n))) => Some((offset, n.min(PAGE / 2))),
            };
            let (Some((offset, n)), Some(path)) = (keep, paths.get(&ino)) else {
                continue;
            };
            // Memory holds exactly the last write's bytes at its range (nothing came after it,
            // but perhaps a truncation).
            let start = offset as usize;
            let part = &contents.bytes[start.min(contents.bytes.len())..]
                [..n.min(contents.bytes.len().saturating_sub(start))];
            if let Ok(file) = OpenOptions::new().write(true).open(self.backing.join(path)) {
                file.write_all_at(part, offset)
                    .expect("write the torn part");
                lost.torn_kept += part.len() as u64;
                lost.bytes -= part.len() as u64;
            }
        }
        lost
    }

    /// The last write not synced yet of the file at `path` (relative to the mount), as this
    /// file system received it: `(offset, length)`. The kernel may split one `write` call
    /// (a short write, which `write_all_at` completes with another call).
    pub fn last_unsynced(&self, path: &Path) -> Option<(u64, usize)> {
        let state = lock(&self.state);
        let ino = state.inodes.get(path)?;
        state.files.get(ino)?.unsynced.last().copied()
    }

    /// Bytes written and not synced yet, over every file.
    pub fn unsynced_bytes(&self) -> u64 {
        lock(&self.state)
            .files
            .values()
            .flat_map(|c| c.unsynced.iter().map(|&(_, n)| n as u64))
            .sum()
    }
}

/// A mounted `LazyFs`; dropping it unmounts.
pub struct Mounted {
    disk: Disk,
    session: Option<BackgroundSession>,
    mountpoint: PathBuf,
}

impl Mounted {
    /// Mounts a fresh `LazyFs` of `backing` at `mountpoint`; fails the test if FUSE cannot
    /// mount here.
    pub fn mount(backing: &Path, mountpoint: &Path) -> Self {
        let disk = Disk::new(backing);
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName("lazyfs".into()),
            MountOption::DefaultPermissions,
        ];
        let fs = LazyFs { disk: disk.clone() };
        let session = fuser::spawn_mount(fs, mountpoint, &config).unwrap_or_else(|e| {
            panic!(
                "cannot mount the FUSE test file system at {}: {e}. The power-loss tests need \
                 /dev/fuse (present: {}) and fusermount3 (Debian's fuse3; on PATH: {})",
                mountpoint.display(),
                Path::new("/dev/fuse").exists(),
                on_path("fusermount3"),
            )
        });
        Self {
            disk,
            session: Some(session),
            mountpoint: mountpoint.to_path_buf(),
        }
    }

    pub fn disk(&self) -> &Disk {
        &self.disk
    }

    /// Cuts the power (see `Disk::cut`) and unmounts; `mount` again to go on.
    pub fn cut(mut self, how: Cut) -> Lost {
        let lost = self.disk.cut(how);
        self.unmount();
        lost
    }

    fn unmount(&mut self) {
        if let Some(session) = self.session.take()
            && let Err(e) = session.umount_and_join()
        {
            // Still busy (a late close of a killed process): detach it lazily.
            let _ = std::process::Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(&self.mountpoint)
                .status();
            eprintln!("lazyfs: unmount of {}: {e}", self.mountpoint.display());
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        self.unmount();
    }
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).exists()))
}

struct LazyFs {
    disk: Disk,
}

impl LazyFs {
    /// The state, or `EIO` once the power is off.
    fn state(&self) -> Result<MutexGuard<'_, State>, Errno> {
        let state = lock(&self.disk.state);
        if state.off {
            return Err(Errno::EIO);
        }
        Ok(state)
    }

    fn real(&self, relative: &Path) -> PathBuf {
        self.disk.backing.join(relative)
    }

    fn path_of(state: &State, ino: INodeNo) -> Result<PathBuf, Errno> {
        state.paths.get(&ino.0).cloned().ok_or(Errno::ENOENT)
    }

    fn child(state: &State, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(Self::path_of(state, parent)?.join(name))
    }

    fn intern(state: &mut State, path: &Path) -> u64 {
        if let Some(&ino) = state.inodes.get(path) {
            return ino;
        }
        let ino = state.next_ino;
        state.next_ino += 1;
        state.paths.insert(ino, path.to_path_buf());
        state.inodes.insert(path.to_path_buf(), ino);
        ino
    }

    /// The attributes of `path`, the size as the running programs see it.
    fn attr(&self, state: &mut State, path: &Path) -> Result<FileAttr, Errno> {
        let meta = fs::symlink_metadata(self.real(path)).map_err(errno)?;
        let ino = Self::intern(state, path);
        let kind = if meta.is_dir() {
            FileType::Directory
        } else {
            FileType::RegularFile
        };
        let size = state
            .files
            .get(&ino)
            .map_or(meta.len(), |c| c.bytes.len() as u64);
        let time = |secs: i64| SystemTime::UNIX_EPOCH + Duration::from_secs(secs.max(0) as u64);
        Ok(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: time(meta.atime()),
            mtime: time(meta.mtime()),
            ctime: time(meta.ctime()),
            crtime: time(meta.ctime()),
            kind,
            perm: (meta.mode() & 0o7777) as u16,
            nlink: meta.nlink() as u32,
            uid: meta.uid(),
            gid: meta.gid(),
            rdev: 0,
            blksize: PAGE as u32,
            flags: 0,
        })
    }

    /// The file's contents in memory, read from the backing file the first time.
    fn contents<'s>(&self, state: &'s mut State, ino: INodeNo) -> Result<&'s mut Contents, Errno> {
        if !state.files.contains_key(&ino.0) {
            let path = self.real(&Self::path_of(state, ino)?);
            let mut bytes = Vec::new();
            File::open(path)
                .and_then(|mut f| f.read_to_end(&mut bytes))
                .map_err(errno)?;
            let synced_len = bytes.len() as u64;
            let contents = Contents {
                bytes,
                unsynced: Vec::new(),
                synced_len,
            };
            state.files.insert(ino.0, contents);
        }
        Ok(state.files.get_mut(&ino.0).expect("just inserted"))
    }

    fn sync(&self, ino: INodeNo) -> Result<(), Errno> {
        let mut state = self.state()?;
        let path = self.real(&Self::path_of(&state, ino)?);
        let Some(contents) = state.files.get_mut(&ino.0) else {
            return Ok(()); // never read or written here: nothing unsynced
        };
        let file = OpenOptions::new().write(true).open(path).map_err(errno)?;
        for &(offset, n) in &contents.unsynced {
            let end = (offset as usize + n).min(contents.bytes.len());
            let start = (offset as usize).min(end);
            file.write_all_at(&contents.bytes[start..end], offset)
                .map_err(errno)?;
        }
        file.set_len(contents.bytes.len() as u64).map_err(errno)?;
        contents.unsynced.clear();
        contents.synced_len = contents.bytes.len() as u64;
        Ok(())
    }

    fn entry(&self, path: Result<PathBuf, Errno>, reply: ReplyEntry) {
        let attr = path.and_then(|path| {
            let mut state = self.state()?;
            self.attr(&mut state, &path)
        });
        match attr {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn empty(reply: ReplyEmpty, result: Result<(), Errno>) {
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}

impl fuser::Filesystem for LazyFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let path = self
            .state()
            .and_then(|state| Self::child(&state, parent, name));
        self.entry(path, reply);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let attr = self.state().and_then(|mut state| {
            let path = Self::path_of(&state, ino)?;
            self.attr(&mut state, &path)
        });
        match attr {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let attr = self.state().and_then(|mut state| {
            let path = Self::path_of(&state, ino)?;
            if let Some(mode) = mode {
                fs::set_permissions(self.real(&path), fs::Permissions::from_mode(mode & 0o7777))
                    .map_err(errno)?;
            }
            if let Some(size) = size {
                // A length change is data: kept in memory until the file is synced.
                let contents = self.contents(&mut state, ino)?;
                contents.bytes.resize(size as usize, 0);
            }
            self.attr(&mut state, &path)
        });
        match attr {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let path = self.state().and_then(|state| {
            let path = Self::child(&state, parent, name)?;
            fs::DirBuilder::new()
                .mode(mode & !umask)
                .create(self.real(&path))
                .map_err(errno)?;
            Ok(path)
        });
        self.entry(path, reply);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let result = self.state().and_then(|mut state| {
            let path = Self::child(&state, parent, name)?;
            fs::remove_file(self.real(&path)).map_err(errno)?;
            if let Some(ino) = state.inodes.remove(&path) {
                state.paths.remove(&ino);
                state.files.remove(&ino);
            }
            Ok(())
        });
        Self::empty(reply, result);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let result = self.state().and_then(|mut state| {
            let path = Self::child(&state, parent, name)?;
            fs::remove_dir(self.real(&path)).map_err(errno)?;
            if let Some(ino) = state.inodes.remove(&path) {
                state.paths.remove(&ino);
            }
            Ok(())
        });
        Self::empty(reply, result);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let result = self.state().and_then(|mut state| {
            let from = Self::child(&state, parent, name)?;
            let to = Self::child(&state, newparent, newname)?;
            fs::rename(self.real(&from), self.real(&to)).map_err(errno)?;
            if let Some(gone) = state.inodes.remove(&to) {
                state.paths.remove(&gone);
                state.files.remove(&gone);
            }
            // Every name at or under `from` moves (a file, or a folder and what it holds).
            let moved: Vec<(PathBuf, u64)> = state
                .inodes
                .iter()
                .filter(|(path, _)| path.starts_with(&from))
                .map(|(path, &ino)| (path.clone(), ino))
                .collect();
            for (old, ino) in moved {
                // (`join("")` would add a slash, and a file's path would then name a folder.)
                let rest = old.strip_prefix(&from).expect("under from");
                let new = match rest.as_os_str().is_empty() {
                    true => to.clone(),
                    false => to.join(rest),
                };
                state.inodes.remove(&old);
                state.inodes.insert(new.clone(), ino);
                state.paths.insert(ino, new);
            }
            Ok(())
        });
        Self::empty(reply, result);
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.state().and_then(|state| Self::path_of(&state, ino)) {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        const O_EXCL: i32 = 0o200;
        let attr = self.state().and_then(|mut state| {
            let path = Self::child(&state, parent, name)?;
            let mut options = OpenOptions::new();
            options.write(true).mode(mode & !umask);
            if flags & O_EXCL != 0 {
                options.create_new(true);
            } else {
                options.create(true);
            }
            options.open(self.real(&path)).map_err(errno)?;
            self.attr(&mut state, &path)
        });
        match attr {
            Ok(attr) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(0),
                FopenFlags::empty(),
            ),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let read = self.state().and_then(|mut state| {
            let contents = self.contents(&mut state, ino)?;
            let start = (offset as usize).min(contents.bytes.len());
            let end = (start + size as usize).min(contents.bytes.len());
            Ok(contents.bytes[start..end].to_vec())
        });
        match read {
            Ok(bytes) => reply.data(&bytes),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let written = self.state().and_then(|mut state| {
            let contents = self.contents(&mut state, ino)?;
            let end = offset as usize + data.len();
            if contents.bytes.len() < end {
                contents.bytes.resize(end, 0);
            }
            contents.bytes[offset as usize..end].copy_from_slice(data);
            contents.unsynced.push((offset, data.len()));
            Ok(data.len() as u32)
        });
        match written {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // A close is no sync.
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        Self::empty(reply, self.sync(ino));
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let entries = self.state().and_then(|mut state| {
            let path = Self::path_of(&state, ino)?;
            let mut entries = vec![
                (ino.0, FileType::Directory, ".".into()),
                (ino.0, FileType::Directory, "..".into()),
            ];
            for entry in fs::read_dir(self.real(&path)).map_err(errno)? {
                let entry = entry.map_err(errno)?;
                let kind = match entry.file_type().map_err(errno)?.is_dir() {
                    true => FileType::Directory,
                    false => FileType::RegularFile,
                };
                let child = Self::intern(&mut state, &path.join(entry.file_name()));
                entries.push((child, kind, entry.file_name()));
            }
            Ok(entries)
        });
        match entries {
            Ok(entries) => {
                for (i, (child, kind, name)) in
                    entries.into_iter().enumerate().skip(offset as usize)
                {
                    if reply.add(INodeNo(child), i as u64 + 1, kind, name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // Names are durable at once (see the header).
        Self::empty(reply, self.state().map(drop));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // A roomy disk: 1 GiB of 4 KiB blocks, all free.
        let blocks = 1 << 18;
        reply.statfs(
            blocks,
            blocks,
            blocks,
            1 << 20,
            1 << 20,
            PAGE as u32,
            255,
            PAGE as u32,
        );
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        Self::empty(reply, self.state().map(drop));
    }
}
