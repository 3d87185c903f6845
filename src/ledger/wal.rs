//! The write-ahead log of a redb ledger (`<ledger>.wal` beside the file): how a batch of the
//! writer becomes durable with one small append and one `fdatasync`, instead of a durable
//! redb commit that writes every page the batch touched.
//!
//! The writer stages a batch, appends the batch's redo records (`redo`) to the log as one
//! frame and commits the transaction without an fsync (redb makes it visible to readers and
//! keeps its pages in memory); the syncer (`syncer`) syncs the log and only then answers the
//! batch. No reader can see a change the log does not hold, no answer leaves before its frame
//! is synced, and until then the operations the batch wrote are held from replays
//! (`recovery::Shared::hold`). Every 200 ms (or once the log
//! holds 24 MiB) a checkpoint commits durably, which writes redb's dirty pages
//! once for all the batches since the last one, records in the ledger's `meta` table the last
//! frame it includes, and empties the log.
//!
//! Opening replays every frame after that mark, in order, onto the file (a killed proxy's
//! redb file holds only its last durable commit), so the ledger is exactly what was
//! answered. The log is preallocated and reused from its head after each checkpoint. A frame is `len u32, crc32 u32, lsn u64, records`; the checksum covers the
//! length, the sequence number and the records. The scan ends at the first frame that is cut
//! short, fails its checksum or does not follow its predecessor: only an unsynced append can
//! be torn, and nobody was answered for it. If a whole frame further on continues the sequence,
//! the stop was damage in the middle, not a torn end, and the start is refused
//! (`continuation`): replaying only the frames before it would forget answered ones. The header (`IDEMWAL1` and a random ID also kept
//! in `meta`) ties the log to its ledger file: a log holding another file's frames is
//! refused, never replayed.

use std::fs::{File, OpenOptions};
use std::io::{self, Read as _};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use redb::{Database, Durability, ReadTransaction, ReadableDatabase, WriteTransaction};

use super::fault::Fault;
use super::redo;
use super::store::{self};

const MAGIC: &[u8; 8] = b"IDEMWAL1";
/// The magic and the log's ID.
const HEADER: u64 = 16;
/// A frame's length, checksum and sequence number.
pub(super) const FRAME_HEAD: usize = 16;
/// A checkpoint is due once the log holds this much...
const CHECKPOINT_BYTES: u64 = 24 << 20;
/// The log's size from its creation (see `write_header`), room for a checkpoint's frames.
const PREALLOCATED: u64 = 32 << 20;
/// ...or its oldest frame is this old (`IDEMPROXY_WAL_CHECKPOINT_MS` sets another age, for
/// the tests that need the log to hold what they wrote when they kill the proxy).
const CHECKPOINT_AFTER: Duration = Duration::from_millis(200);

/// The log of one open ledger, owned by its writer thread.
pub(super) struct Wal {
    path: PathBuf,
    file: File,
    /// The ID in the header, the same as the ledger's `meta`.
    id: u64,
    /// The sequence number of the last frame appended, or, when the log holds none, of the
    /// last frame the ledger file's durable state includes.
    last: u64,
    /// Where the next frame goes.
    len: u64,
    /// When the oldest frame not yet checkpointed was appended.
    oldest: Option<Instant>,
    /// How old that frame may grow before a checkpoint.
    checkpoint_after: Duration,
    /// The last frame's buffer, kept for the next (`scratch`).
    spare: Vec<u8>,
}

/// Where the log of the ledger at `ledger` lives.
pub(super) fn path_of(ledger: &Path) -> PathBuf {
    let mut name = ledger.as_os_str().to_owned();
    name.push(".wal");
    PathBuf::from(name)
}

impl Wal {
    /// Opens (or creates) the log of `ledger`, whose database is `db`, and replays what it
    /// holds beyond `db`'s durable state (`recover`).
    pub(super) fn open(ledger: &Path, db: &Database) -> Result<Wal, Fault> {
        let path = path_of(ledger);
        let shown = path.display().to_string();
        let failed = |e: io::Error| Fault::new(format!("{shown}: {e}"));
        let mut options = OpenOptions::new();
        options.read(true).write(true).create(true).truncate(false);
        // Created readable by its owner only, like the ledger (`redb::private_file`).
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options.open(&path).map_err(failed)?;
        let (kept, applied) = mark(db)?;
        let id = match header(&read_head(&file).map_err(failed)?) {
            Header::Empty => None,
            Header::Foreign => {
                return Err(Fault::new(format!(
                    "{shown} is not a write-ahead log of idemproxy; move it away"
                )));
            }
            Header::Id(id) => Some(id),
        };
        let mut wal = Wal {
            path,
            file,
            id: kept.unwrap_or_else(new_id),
            last: applied,
            len: HEADER,
            oldest: None,
            checkpoint_after: checkpoint_after(),
            spare: Vec::new(),
        };
        if id.is_none() || id != kept {
            if !has_frames(&wal.file)? {
                wal.write_header().map_err(failed)?;
                // A log without a header is new (or was left empty before its name could be
                // made durable): its folder is synced, so a power cut cannot lose the name.
                crate::durable::sync_parent(&wal.path).map_err(failed)?;
            } else {
                return Err(Fault::new(format!(
                    "{} holds writes of another ledger file (was the ledger replaced or \
                     deleted?); move it away to start on this ledger",
                    wal.path.display()
                )));
            }
        }
        wal.recover(db)?;
        Ok(wal)
    }

    /// Replays every frame beyond `db`'s durable state onto it, in one commit without an
    /// fsync (the log keeps them durable), and cuts a torn tail off the log. Start-up calls it
    /// through `open`; the reopen after a storage error calls it again.
    pub(super) fn recover(&mut self, db: &Database) -> Result<usize, Fault> {
        let shown = self.path.display().to_string();
        let (_, applied) = mark(db)?;
        // One transaction for every frame beyond the mark, begun at the first of them.
        let mut txn: Option<WriteTransaction> = None;
        let mut replayed = 0;
        let mut last = applied;
        let walked = walk(&self.file, |lsn, records| {
            if lsn <= applied {
                return Ok(());
            }
            if lsn != last + 1 {
                return Err(Fault::new(format!(
                    "{shown}: its first frame beyond the ledger's last checkpoint ({applied}) \
                     is {lsn}: frames are missing, so it is not replayed"
                )));
            }
            let txn = match &mut txn {
                Some(txn) => txn,
                None => {
                    let mut began = db.begin_write()?;
                    began.set_durability(Durability::None)?;
                    txn.insert(began)
                }
            };
            redo::apply(txn, records)?;
            last = lsn;
            replayed += 1;
            Ok(())
        });
        // Only the last append can be torn: a whole frame beyond the scan's end that continues
        // the sequence means a frame in the middle is damaged, and what follows it was
        // answered too.
        let floor = last.max(applied);
        let end = walked.and_then(|end| match continuation(&self.file, end, floor)? {
            None => Ok(end),
            Some((at, lsn)) => Err(Fault::new(format!(
                "{shown}: the frame at byte {end} is damaged, yet a whole frame after it (byte \
                 {at}, sequence {lsn}, after {floor}) continues the log: the log is corrupt in \
                 the middle, not torn at its end, and replaying only what comes before the \
                 damage would forget answered operations. The ledger is not opened; keep the \
                 ledger file and its log as they are and restore both from a backup"
            ))),
        });
        let end = match end {
            Ok(end) => end,
            Err(e) => {
                if let Some(txn) = txn {
                    let _ = txn.abort();
                }
                return Err(e);
            }
        };
        let torn = torn_bytes(&self.file, end)?;
        tracing::info!(
            log = %shown,
            replayed,
            ignored_frames = usize::from(torn > 0),
            ignored_bytes = torn,
            "write-ahead log read: its frames beyond the last checkpoint were replayed; a torn \
             last frame, if any, was ignored"
        );
        if let Some(txn) = txn {
            txn.commit()?;
        }
        self.last = last;
        if replayed == 0 {
            // Everything in it is in the file already: the log starts afresh.
            self.restart();
        } else {
            // A torn tail, if any, is overwritten by the next frame.
            self.len = end;
            self.oldest = Some(Instant::now());
        }
        Ok(replayed)
    }

    /// A buffer for the next frame: empty but for room for its head (`append` fills it), the
    /// batch's redo records go after it. The buffer of the last frame is reused, so a batch
    /// allocates nothing for its frame.
    pub(super) fn scratch(&mut self) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.spare);
        buf.clear();
        buf.resize(FRAME_HEAD, 0);
        buf
    }

    /// Takes back a buffer from `scratch` for the next frame (one that grew past 4 MiB for a
    /// batch of large answers is let go).
    pub(super) fn recycle(&mut self, buf: Vec<u8>) {
        if buf.capacity() <= 4 << 20 {
            self.spare = buf;
        }
    }

    /// Appends `frame` (from `scratch`: its head, then the records), unsynced; returns its
    /// sequence number. The syncer (`syncer`) syncs it before anyone is answered for it; a
    /// checkpoint makes it moot. On an error the frame's head is overwritten with zeros if
    /// the disk allows, so no later scan takes it.
    pub(super) fn append(&mut self, frame: &mut [u8]) -> io::Result<u64> {
        let lsn = self.last + 1;
        seal(lsn, frame)?;
        if let Err(e) = self.file.write_all_at(frame, self.len) {
            let _ = self.file.write_all_at(&[0; FRAME_HEAD], self.len);
            return Err(e);
        }
        self.last = lsn;
        self.len += frame.len() as u64;
        self.oldest.get_or_insert_with(Instant::now);
        Ok(lsn)
    }

    /// A second handle on the log file, for the syncer.
    pub(super) fn handle(&self) -> io::Result<File> {
        self.file.try_clone()
    }

    /// The sequence number of the last frame appended.
    pub(super) fn last(&self) -> u64 {
        self.last
    }

    /// Commits `txn` durably (its durability `Immediate`) as a checkpoint: it records that the
    /// ledger file then holds every frame appended so far, and once it has committed the log
    /// starts afresh at its head. The old frames stay behind the new ones until overwritten; a
    /// scan never reaches them, as none follows its predecessor.
    pub(super) fn commit_checkpoint(&mut self, txn: WriteTransaction) -> Result<(), Fault> {
        if let Err(e) = store::set_wal_mark(&txn, self.id, self.last) {
            let _ = txn.abort();
            return Err(e);
        }
        txn.commit()?;
        self.restart();
        Ok(())
    }

    /// A durable commit of everything committed so far, then an empty log.
    pub(super) fn checkpoint(&mut self, db: &Database) -> Result<(), Fault> {
        let mut txn = db.begin_write()?;
        txn.set_durability(Durability::Immediate)?;
        self.commit_checkpoint(txn)
    }

    /// How long until a checkpoint is due (`None`: the log holds nothing to checkpoint).
    pub(super) fn due_in(&self) -> Option<Duration> {
        let oldest = self.oldest?;
        if self.len >= CHECKPOINT_BYTES {
            return Some(Duration::ZERO);
        }
        Some(self.checkpoint_after.saturating_sub(oldest.elapsed()))
    }

    /// Writes a new header and preallocates the log: frames then overwrite blocks the file
    /// already has, so the sync after each one flushes data only, not the file's size. A disk
    /// without room for the preallocation gets a log that grows as it is written instead.
    fn write_header(&mut self) -> io::Result<()> {
        let mut head = [0_u8; HEADER as usize];
        head[..8].copy_from_slice(MAGIC);
        head[8..].copy_from_slice(&self.id.to_le_bytes());
        self.file.set_len(0)?;
        self.file.write_all_at(&head, 0)?;
        if self.preallocate().is_err() {
            self.file.set_len(HEADER)?;
        }
        self.file.sync_all()?;
        self.len = HEADER;
        Ok(())
    }

    fn preallocate(&self) -> io::Result<()> {
        let zeros = vec![0_u8; 1 << 20];
        let mut at = HEADER;
        while at < PREALLOCATED {
            self.file.write_all_at(&zeros, at)?;
            at += zeros.len() as u64;
        }
        Ok(())
    }

    /// Starts the log again at its head: every frame in it is in the file. The first frame's
    /// head is zeroed (unsynced: if that is lost, the next start walks the old frames and skips
    /// them), so a start after a graceful stop reads nothing.
    fn restart(&mut self) {
        self.len = HEADER;
        self.oldest = None;
        if let Err(e) = self.file.write_all_at(&[0; FRAME_HEAD], HEADER) {
            tracing::debug!(log = %self.path.display(), error = %e, "the write-ahead log's head stays");
        }
    }
}

/// Whether the log beside `ledger` holds frames that `txn`'s ledger lacks (a killed proxy's
/// last batches), or frames of another ledger: either way the file alone is not the ledger.
pub(super) fn pending(ledger: &Path, txn: &ReadTransaction) -> Result<bool, Fault> {
    let path = path_of(ledger);
    let failed = |e: io::Error| Fault::new(format!("{}: {e}", path.display()));
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(failed(e)),
    };
    let (kept, applied) = store::wal_mark(txn)?;
    Ok(match header(&read_head(&file).map_err(failed)?) {
        Header::Empty => false,
        Header::Foreign => true,
        Header::Id(id) => {
            let mut frames = 0;
            let mut beyond = false;
            walk(&file, |lsn, _| {
                frames += 1;
                beyond |= lsn > applied;
                Ok(())
            })?;
            (Some(id) != kept && frames > 0) || beyond
        }
    })
}

/// Replays the log beside `ledger`, if there is one, onto `db` (opened writable) and
/// checkpoints it, so the file alone holds the whole ledger: for `ledger copy`, which reads
/// and fills files with no writer thread.
pub(super) fn settle(ledger: &Path, db: &Database) -> Result<(), Fault> {
    if !path_of(ledger).exists() {
        return Ok(());
    }
    Wal::open(ledger, db)?.checkpoint(db)
}

fn checkpoint_after() -> Duration {
    std::env::var("IDEMPROXY_WAL_CHECKPOINT_MS")
        .ok()
        .and_then(|ms| ms.trim().parse().ok())
        .map_or(CHECKPOINT_AFTER, Duration::from_millis)
}

/// The log's ID kept in the ledger and the last frame its durable state includes.
fn mark(db: &Database) -> Result<(Option<u64>, u64), Fault> {
    let txn = db.begin_read()?;
    store::wal_mark(&txn)
}

fn new_id() -> u64 {
    use ring::rand::{SecureRandom, SystemRandom};
    let mut bytes = [0_u8; 8];
    // The ID only tells one ledger file's log from another's; the clock will do if the
    // system's randomness is unavailable.
    if SystemRandom::new().fill(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes = (nanos as u64 ^ u64::from(std::process::id())).to_le_bytes();
    }
    u64::from_le_bytes(bytes)
}

/// The first `HEADER` bytes of the log (fewer if it is shorter).
fn read_head(file: &File) -> io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(HEADER as usize);
    file.take(HEADER).read_to_end(&mut head)?;
    Ok(head)
}

/// Whether the log holds any whole frame.
fn has_frames(file: &File) -> Result<bool, Fault> {
    let mut any = false;
    walk(file, |_, _| {
        any = true;
        Ok(())
    })?;
    Ok(any)
}

/// Hands each whole frame of the log file to `each`, in order, one at a time; returns where
/// they end.
fn walk(file: &File, each: impl FnMut(u64, &[u8]) -> Result<(), Fault>) -> Result<u64, Fault> {
    let len = file
        .metadata()
        .map_err(|e| Fault::new(format!("the write-ahead log: {e}")))?
        .len();
    walk_with(len, |at, buf| file.read_exact_at(buf, at), each)
        .map_err(|e| e.unwrap_or_else(|io| Fault::new(format!("the write-ahead log: {io}"))))
}

/// The scan over a log of `len` bytes read through `read_at`: each whole frame that follows
/// its predecessor, until the first that does not (see the module's docs). Only one frame is
/// in memory at a time.
fn walk_with(
    len: u64,
    mut read_at: impl FnMut(u64, &mut [u8]) -> io::Result<()>,
    mut each: impl FnMut(u64, &[u8]) -> Result<(), Fault>,
) -> Result<u64, Result<Fault, io::Error>> {
    let mut at = HEADER;
    let mut prev: Option<u64> = None;
    let mut frame = Vec::new();
    while at + FRAME_HEAD as u64 <= len {
        let mut head = [0_u8; FRAME_HEAD];
        read_at(at, &mut head).map_err(Err)?;
        let size = u64::from(u32::from_le_bytes([head[0], head[1], head[2], head[3]]));
        let end = at + FRAME_HEAD as u64 + size;
        if end > len {
            break;
        }
        frame.clear();
        frame.extend_from_slice(&head);
        frame.resize(FRAME_HEAD + size as usize, 0);
        read_at(at + FRAME_HEAD as u64, &mut frame[FRAME_HEAD..]).map_err(Err)?;
        let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        let lsn = u64::from_le_bytes(head[8..16].try_into().unwrap_or_default());
        if checksum(&frame) != crc || prev.is_some_and(|p| lsn != p + 1) {
            break;
        }
        each(lsn, &frame[FRAME_HEAD..]).map_err(Ok)?;
        prev = Some(lsn);
        at = end;
    }
    Ok(at)
}

/// How many damaged frames in a row `continuation` looks past.
const DAMAGE_SPAN: u64 = 256;

/// The first whole frame after byte `from` whose sequence number is one of the next
/// `DAMAGE_SPAN` after `floor` (the last frame the scan accepted, or the checkpoint's): where
/// the log goes on after a damaged frame. Frames left over from before a checkpoint have lower
/// numbers, and the bytes of a torn append fail their checksum. The search looks for those
/// numbers' upper seven bytes (`memmem`), in pieces, so it is quick and memory stays flat
/// whatever the log's size.
fn continuation(file: &File, from: u64, floor: u64) -> Result<Option<(u64, u64)>, Fault> {
    let failed = |e: io::Error| Fault::new(format!("the write-ahead log: {e}"));
    let len = file.metadata().map_err(failed)?.len();
    let wanted = floor + 1..=floor.saturating_add(DAMAGE_SPAN);
    let mut uppers: Vec<[u8; 7]> = wanted.clone().map(upper_bytes).collect();
    uppers.dedup();
    const PIECE: u64 = 1 << 20;
    let mut buf = vec![0_u8; PIECE.min(len) as usize];
    let mut start = from + 1;
    while start + FRAME_HEAD as u64 <= len {
        // Pieces overlap by a head: a head that starts in one piece is whole in it or the next.
        let size = PIECE.min(len - start);
        let piece = &mut buf[..size as usize];
        file.read_exact_at(piece, start).map_err(failed)?;
        let piece = &*piece;
        for (from, to) in written(piece) {
            for upper in &uppers {
                for hit in memchr::memmem::find_iter(&piece[from..to], upper) {
                    // The sequence number's upper bytes sit 9 bytes into a head.
                    let Some(i) = (from + hit).checked_sub(9) else {
                        continue;
                    };
                    let head = &piece[i..i + FRAME_HEAD];
                    let lsn = u64::from_le_bytes(head[8..16].try_into().unwrap_or_default());
                    let at = start + i as u64;
                    if wanted.contains(&lsn) && is_whole_frame(file, at, len).map_err(failed)? {
                        return Ok(Some((at, lsn)));
                    }
                }
            }
        }
        if start + size >= len {
            break;
        }
        start += size - FRAME_HEAD as u64;
    }
    Ok(None)
}

/// The stretches of `piece` outside its all-zero 4 KiB blocks (never written, or emptied),
/// each widened by a head on both sides so no head across a block's edge is missed: a head
/// inside a zero block is all zeros, never a frame. Searching only these keeps a mostly empty
/// log quick, where the search pattern of a young ledger (seven zero bytes) is everywhere.
fn written(piece: &[u8]) -> Vec<(usize, usize)> {
    const BLOCK: usize = 4096;
    static ZEROS: [u8; BLOCK] = [0; BLOCK];
    let mut stretches: Vec<(usize, usize)> = Vec::new();
    for (n, block) in piece.chunks(BLOCK).enumerate() {
        if block == &ZEROS[..block.len()] {
            continue;
        }
        let from = (n * BLOCK).saturating_sub(FRAME_HEAD);
        let to = (n * BLOCK + block.len() + FRAME_HEAD).min(piece.len());
        match stretches.last_mut() {
            Some(last) if last.1 >= from => last.1 = to,
            _ => stretches.push((from, to)),
        }
    }
    stretches
}

/// The upper seven bytes of a sequence number as a head holds it (little-endian).
fn upper_bytes(lsn: u64) -> [u8; 7] {
    let mut upper = [0_u8; 7];
    upper.copy_from_slice(&lsn.to_le_bytes()[1..]);
    upper
}

/// Whether a whole frame with a valid checksum starts at `at`.
fn is_whole_frame(file: &File, at: u64, len: u64) -> io::Result<bool> {
    let mut head = [0_u8; FRAME_HEAD];
    file.read_exact_at(&mut head, at)?;
    let size = u64::from(u32::from_le_bytes([head[0], head[1], head[2], head[3]]));
    if at + FRAME_HEAD as u64 + size > len {
        return Ok(false);
    }
    let mut frame = vec![0_u8; FRAME_HEAD + size as usize];
    file.read_exact_at(&mut frame, at)?;
    let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    Ok(checksum(&frame) == crc)
}

/// How many bytes the frame the scan stopped at claims (cut at the file's end): what a torn
/// last append left. 0 when its head is zeroed (an emptied log) or the file ends there.
fn torn_bytes(file: &File, at: u64) -> Result<u64, Fault> {
    let failed = |e: io::Error| Fault::new(format!("the write-ahead log: {e}"));
    let len = file.metadata().map_err(failed)?.len();
    if at + FRAME_HEAD as u64 > len {
        return Ok(len.saturating_sub(at));
    }
    let mut head = [0_u8; FRAME_HEAD];
    file.read_exact_at(&mut head, at).map_err(failed)?;
    if head.iter().all(|&b| b == 0) {
        return Ok(0);
    }
    let size = u64::from(u32::from_le_bytes([head[0], head[1], head[2], head[3]]));
    Ok((FRAME_HEAD as u64 + size).min(len - at))
}

enum Header {
    /// No header yet (a new or emptied file).
    Empty,
    /// Not a log of ours.
    Foreign,
    Id(u64),
}

fn header(bytes: &[u8]) -> Header {
    if bytes.len() < HEADER as usize {
        return if bytes.iter().all(|&b| b == 0) {
            Header::Empty
        } else {
            Header::Foreign
        };
    }
    if &bytes[..8] != MAGIC {
        return Header::Foreign;
    }
    let mut id = [0_u8; 8];
    id.copy_from_slice(&bytes[8..16]);
    Header::Id(u64::from_le_bytes(id))
}

/// Fills the head of `frame` (`FRAME_HEAD` bytes, then its records): length, checksum, `lsn`.
fn seal(lsn: u64, frame: &mut [u8]) -> io::Result<()> {
    let records = frame.len().saturating_sub(FRAME_HEAD);
    let len = u32::try_from(records)
        .map_err(|_| io::Error::other("a batch too large for one log frame"))?;
    frame[..4].copy_from_slice(&len.to_le_bytes());
    frame[8..16].copy_from_slice(&lsn.to_le_bytes());
    let crc = checksum(frame);
    frame[4..8].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// The checksum of a frame: everything but its own four bytes.
fn checksum(frame: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&frame[..4]);
    hasher.update(&frame[8..]);
    hasher.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Scanned {
        frames: Vec<(u64, Vec<u8>)>,
        end: u64,
    }

    fn scan(bytes: &[u8]) -> Scanned {
        let mut frames = Vec::new();
        let end = walk_with(
            bytes.len() as u64,
            |at, buf| {
                buf.copy_from_slice(&bytes[at as usize..at as usize + buf.len()]);
                Ok(())
            },
            |lsn, records| {
                frames.push((lsn, records.to_vec()));
                Ok(())
            },
        )
        .unwrap_or_else(|_| panic!("the scan itself fails"));
        Scanned { frames, end }
    }

    fn framed(list: &[(u64, &[u8])]) -> Vec<(u64, Vec<u8>)> {
        list.iter().map(|(l, r)| (*l, r.to_vec())).collect()
    }

    fn log(frames: &[(u64, &[u8])]) -> Vec<u8> {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&7_u64.to_le_bytes());
        for (lsn, records) in frames {
            let mut frame = vec![0; FRAME_HEAD];
            frame.extend_from_slice(records);
            seal(*lsn, &mut frame).unwrap();
            bytes.extend(frame);
        }
        bytes
    }

    #[test]
    fn a_log_scans_back_to_its_frames() {
        let bytes = log(&[(4, b"a"), (5, b"bc"), (6, b"")]);
        let scanned = scan(&bytes);
        assert_eq!(scanned.frames, framed(&[(4, b"a"), (5, b"bc"), (6, b"")]));
        assert_eq!(scanned.end, bytes.len() as u64);
        assert!(matches!(header(&bytes), Header::Id(7)));
    }

    #[test]
    fn the_scan_ends_at_a_torn_or_damaged_or_stale_frame() {
        let whole = log(&[(1, b"first"), (2, b"second")]);
        let first_end = log(&[(1, b"first")]).len();
        // Every cut inside the second frame loses only the second frame.
        for cut in first_end..whole.len() {
            let scanned = scan(&whole[..cut]);
            assert_eq!(scanned.frames, framed(&[(1, b"first")]), "cut at {cut}");
            assert_eq!(scanned.end, first_end as u64);
        }
        // A flipped byte anywhere in the second frame ends the scan before it.
        for at in first_end..whole.len() {
            let mut damaged = whole.clone();
            damaged[at] ^= 0x40;
            assert_eq!(scan(&damaged).frames.len(), 1, "flipped at {at}");
        }
        // A frame that does not follow its predecessor (left over from before a checkpoint).
        let stale = log(&[(9, b"new"), (3, b"old")]);
        assert_eq!(scan(&stale).frames, framed(&[(9, b"new")]));
    }

    /// The end of the scan over `bytes` and the continuation after it, read from a file.
    fn continued(bytes: &[u8], floor: u64) -> (u64, Option<(u64, u64)>) {
        let end = scan(bytes).end;
        let mut file = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut file, bytes).unwrap();
        (end, continuation(&file, end, floor).unwrap())
    }

    #[test]
    fn a_damaged_frame_followed_by_the_rest_of_the_log_is_found_and_a_torn_tail_is_not() {
        let records: Vec<Vec<u8>> = (0..20).map(|n| vec![n as u8; 10 + n]).collect();
        let frames: Vec<(u64, &[u8])> = (0..20).map(|n| (n as u64 + 1, &records[n][..])).collect();
        let whole = log(&frames);
        let seventh = log(&frames[..6]).len();
        let eighth = log(&frames[..7]).len();
        for at in seventh..eighth {
            let mut damaged = whole.clone();
            damaged[at] ^= 0x01;
            let (end, found) = continued(&damaged, 0);
            assert_eq!(end, seventh as u64, "flipped at {at}");
            let (_, lsn) = found.unwrap_or_else(|| panic!("flipped at {at}: not found"));
            assert!(lsn >= 8, "flipped at {at}: {lsn}");
        }
        // A torn last frame: nothing after it.
        let torn = &whole[..whole.len() - 5];
        assert_eq!(continued(torn, 0).1, None);
        // Frames left over from before a checkpoint (lower numbers) after the end: no chain.
        let mut reused = log(&[(31, b"new"), (32, b"newer")]);
        reused.extend_from_slice(&[0; FRAME_HEAD]);
        reused.extend_from_slice(&whole[HEADER as usize..]);
        assert_eq!(continued(&reused, 32).1, None);
        // The same leftovers beyond a checkpoint mark that is lower: they would continue it.
        assert!(continued(&reused, 0).1.is_some());
        // Over pieces: a continuation far beyond the damage is found across piece borders.
        let mut far = log(&[(1, b"a")]);
        far.extend(vec![0x77; 3 << 20]);
        let mut next = vec![0; FRAME_HEAD];
        next.extend_from_slice(b"b");
        seal(2, &mut next).unwrap();
        far.extend(next);
        let (_, found) = continued(&far, 1);
        assert_eq!(found.map(|(_, lsn)| lsn), Some(2));
    }

    #[test]
    fn headers_tell_an_empty_log_from_a_foreign_file() {
        assert!(matches!(header(b""), Header::Empty));
        assert!(matches!(header(&[0; 5]), Header::Empty));
        assert!(matches!(header(b"not a log at all"), Header::Foreign));
        assert!(matches!(header(b"{}"), Header::Foreign));
    }
}
