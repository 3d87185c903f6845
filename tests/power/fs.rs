//! The test file system itself, so that the power-loss test cannot pass vacuously: what was
//! synced survives a cut, what was not is gone (contents and length), a torn cut keeps the
//! first part of the last unsynced write, and names are durable at once.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::lazyfs::{Cut, Mounted};

struct Dirs {
    backing: tempfile::TempDir,
    mountpoint: tempfile::TempDir,
}

fn dirs() -> Dirs {
    Dirs {
        backing: tempfile::tempdir().expect("backing dir"),
        mountpoint: tempfile::tempdir().expect("mount point"),
    }
}

impl Dirs {
    fn mount(&self) -> Mounted {
        Mounted::mount(self.backing.path(), self.mountpoint.path())
    }
}

#[test]
fn an_unsynced_write_is_gone_after_a_cut_and_a_synced_one_is_kept() {
    let dirs = dirs();
    let mounted = dirs.mount();
    let at = |name: &str| dirs.mountpoint.path().join(name);

    let mut kept = File::create(at("kept")).expect("create on the mount");
    kept.write_all(b"synced").expect("write");
    kept.sync_data().expect("fdatasync");
    kept.write_all(b" and more").expect("write after the sync");
    kept.set_len(64 * 1024).expect("grow, unsynced");
    assert_eq!(fs::read(at("kept")).expect("read").len(), 64 * 1024);

    let mut lost = File::create(at("lost")).expect("create");
    lost.write_all(b"never synced").expect("write");
    fs::create_dir(at("folder")).expect("mkdir");
    fs::rename(at("lost"), at("folder/renamed")).expect("rename");
    assert_eq!(
        fs::read(at("folder/renamed")).expect("read"),
        b"never synced"
    );
    assert!(mounted.disk().unsynced_bytes() > 0);
    drop((kept, lost));

    let dropped = mounted.cut(Cut::Drop);
    assert_eq!(
        dropped.bytes,
        (" and more".len() + "never synced".len()) as u64
    );
    assert_eq!(
        dropped.lengths, 2,
        "the growth of kept and the length of lost"
    );

    let _mounted = dirs.mount();
    assert_eq!(fs::read(at("kept")).expect("read"), b"synced");
    assert_eq!(
        fs::read(at("folder/renamed")).expect("the name is durable at once"),
        b"",
        "its contents never were synced"
    );
    assert!(!at("lost").exists());
}

#[test]
fn a_torn_cut_keeps_the_first_part_of_the_last_unsynced_write_and_nothing_else() {
    for (how, kept) in [(Cut::TornHalf, 4096), (Cut::TornHalfPage, 2048)] {
        let dirs = dirs();
        let mounted = dirs.mount();
        let path = dirs.mountpoint.path().join("pages");
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .expect("create");
        file.write_all_at(&[b'x'; 4096], 0).expect("write");
        file.sync_data().expect("fdatasync");
        file.write_all_at(&[b'y'; 4096], 0)
            .expect("overwrite, unsynced");
        file.write_all_at(&[b'z'; 8192], 4096)
            .expect("the last write");
        drop(file);

        // The last write as the file system got it: the whole 8 KiB, unless the kernel wrote
        // it short (it may, under memory pressure) and `write_all_at` sent the rest after.
        let (offset, n) = mounted
            .disk()
            .last_unsynced(Path::new("pages"))
            .expect("an unsynced write");
        assert!(
            offset >= 4096 && offset as usize + n == 4096 + 8192,
            "{offset} {n}"
        );
        let kept = match (offset, n) {
            (4096, 8192) => kept,
            _ => match how {
                Cut::TornHalfPage => n.min(2048),
                _ => n / 2,
            },
        };
        let lost = mounted.cut(how);
        assert_eq!(lost.torn_kept, kept as u64, "{how:?}");
        assert_eq!(lost.bytes, 4096 + 8192 - kept as u64, "{how:?}");

        let _mounted = dirs.mount();
        // The synced page, then (past a hole, when the last write began later) its first part.
        let mut want = vec![b'x'; 4096];
        want.resize(offset as usize, 0);
        want.extend(std::iter::repeat_n(b'z', kept));
        assert!(fs::read(&path).expect("read") == want, "{how:?}");
    }
}

#[test]
fn after_a_cut_the_disk_refuses_every_call_until_remounted() {
    let dirs = dirs();
    let mounted = dirs.mount();
    let path = dirs.mountpoint.path().join("f");
    fs::write(&path, b"x").expect("write");
    let disk = mounted.disk().clone();
    disk.cut(Cut::Drop);
    let err = fs::read(&path).expect_err("the power is off");
    assert_eq!(err.raw_os_error(), Some(5), "EIO: {err}");
    drop(mounted);
    let _mounted = dirs.mount();
    assert_eq!(fs::read(&path).expect("read"), b"");
}
