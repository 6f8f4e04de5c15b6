//! Substring search of a big list's addresses (`email_contains`), from an in-memory snapshot.
//!
//! SQLite has no index that answers "addresses containing `orange.fr`, in id order, and how many":
//! the FTS5 trigram index had to gather and count every match (224-291 ms for 62,000 of them), and
//! `instr` scans the list's rows (about 230 ms for a million). A snapshot holds each row of a list
//! in id order: its id, status, delivery mode, bounce score, a live flag, and its lowercased address
//! in ONE contiguous buffer, each followed by [`SEP`], which no address and no needle contains. A
//! search is one `memmem` pass over that buffer (a few milliseconds for a million addresses): a hit
//! is mapped to its row (rows come in order, so a cursor advances), the scan jumps to the row's end,
//! the other filters are applied, the row is counted for `total` and, when it falls in the page,
//! its id is kept. The page's rows are then read by id in the caller's transaction.
//!
//! Freshness. Other connections and other processes (the CLI, another server) write the same
//! file, so a snapshot is checked against the caller's read transaction on every search: it
//! records the `member_changes` sequence number it has applied and the highest id it holds. Behind
//! the view, it re-reads the members the log names for its list (updating them in place, or
//! marking them dead), then appends the list's rows above its highest live id (a new row always
//! gets an id above every existing row, also when it reuses the id of a deleted last row). Ahead of
//! the view (another request refreshed it from a newer view), the request is answered by SQL:
//! one answer never mixes two views. A log pruned past the snapshot, too many pending changes, or
//! a changed address that no longer fits its slot rebuild it from the list.
//!
//! Deep pages. `OFFSET` walks every row it skips (about 80 ms at 750,000), so a page at offset
//! `deep_offset` or more of a list that has a snapshot starts from it: one pass over the status and
//! mode columns in memory finds the id of the page's first row (none at all without a filter), then
//! SQL reads the page from that id on (`id >= first ... ORDER BY id LIMIT n`): keyset continuation,
//! found for the client's offset. Snapshot and SQL are the same view, so the rows are those the
//! offset would give.
//!
//! Only lists of at least `min_members` members get one (below that `instr` is fast enough), and
//! their total size stays under a budget: the least recently searched are dropped first.
//!
//! A PostgreSQL adapter would use a pg_trgm index instead: none of this is visible through the port.

use super::map_err;
use courrier_core::kernel::Page;
use courrier_core::mailing::model::{DeliveryMode, ListId, MemberFilter, MemberStatus};
use courrier_core::storage::StoreError;
use rusqlite::{Connection, OptionalExtension};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

/// Ends every address in the buffer. Addresses are printable ASCII and `email_contains` refuses
/// control characters, so no match can span two rows.
const SEP: u8 = 0;

/// More pending changes than this and a rebuild (one ordered read of the list) is cheaper than
/// re-reading each changed member by id.
const MAX_PENDING: i64 = 50_000;

/// When this many rows are dead (deleted or moved members), the snapshot is compacted in memory.
const DEAD_SHARE: usize = 4; // a quarter

/// Rows per block of the counts a deep page's start is found with (small in tests, so that they
/// cross many blocks).
const BLOCK: usize = if cfg!(test) { 8 } else { 4096 };

/// Status and delivery mode pairs: a row's class is `status * modes + mode`.
const CLASSES: usize = MemberStatus::ALL.len() * DeliveryMode::ALL.len();

fn class(status: MemberStatus, mode: DeliveryMode) -> usize {
    status as usize * DeliveryMode::ALL.len() + mode as usize
}

/// Which lists get a snapshot, and how much memory all snapshots may take together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchLimits {
    /// Lists with fewer members are searched by SQL (`instr`), which is fast enough for them.
    pub min_members: u64,
    /// All snapshots together stay under this; the least recently searched go first. 0 disables
    /// snapshots.
    pub budget_bytes: usize,
    /// Pages at this offset or deeper, without `email_contains`, start from the snapshot (below it,
    /// SQL's `OFFSET` is as fast).
    pub deep_offset: u64,
}

impl Default for SearchLimits {
    fn default() -> Self {
        Self { min_members: 20_000, budget_bytes: 256 << 20, deep_offset: 2_000 }
    }
}

/// Where a deep page starts: the id of its first row (`None`: the offset is past the last row),
/// and the number of rows passing the filter when the snapshot had to count them (a bounce floor,
/// which the tallies do not count).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct PageStart {
    pub first: Option<i64>,
    pub total: Option<u64>,
}

/// The page of a search: the ids of its rows in order, and the number of matching rows.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Found {
    pub ids: Vec<i64>,
    pub total: u64,
}

/// What the caller's read transaction sees of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct View {
    /// The last `member_changes.seq` ever given (0 before the first change).
    seq: i64,
    /// The list's highest member id (0 when it has none).
    max_id: i64,
}

/// One list's rows, in id order.
#[derive(Debug, Default)]
struct Snapshot {
    built: bool,
    /// The view it reflects.
    seq: i64,
    max_id: i64,
    ids: Vec<i64>,
    /// Where each row's address starts in `buf`; a row ends where the next one starts.
    starts: Vec<u32>,
    buf: Vec<u8>,
    status: Vec<MemberStatus>,
    mode: Vec<DeliveryMode>,
    bounce: Vec<u32>,
    live: Vec<bool>,
    dead: usize,
    /// Live rows of each class in each block of [`BLOCK`] rows: a deep page skips whole blocks
    /// (a few hundred sums for a million rows) and reads rows only in the block it starts in.
    counts: Vec<[u32; CLASSES]>,
}

/// One member as the snapshot holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    id: i64,
    key: String,
    status: MemberStatus,
    mode: DeliveryMode,
    bounce: u32,
}

/// The buffer would pass 4 GiB: this list is not kept in memory.
#[derive(Debug)]
struct TooBig;

enum Freshness {
    Same,
    Behind,
    Ahead,
}

impl Snapshot {
    fn len(&self) -> usize {
        self.ids.len()
    }

    fn end(&self, i: usize) -> usize {
        self.starts.get(i + 1).map_or(self.buf.len(), |&s| s as usize)
    }

    fn push(&mut self, r: &Row) -> Result<(), TooBig> {
        if self.buf.len() + r.key.len() + 1 > u32::MAX as usize {
            return Err(TooBig);
        }
        self.starts.push(self.buf.len() as u32);
        self.buf.extend_from_slice(r.key.as_bytes());
        self.buf.push(SEP);
        self.ids.push(r.id);
        self.status.push(r.status);
        self.mode.push(r.mode);
        self.bounce.push(r.bounce);
        self.live.push(true);
        self.max_id = r.id;
        self.count(self.len() - 1, 1);
        Ok(())
    }

    /// Adds `by` (1 or -1) to the count of row `i`'s class in its block.
    fn count(&mut self, i: usize, by: i32) {
        let block = i / BLOCK;
        if block >= self.counts.len() {
            self.counts.resize(block + 1, [0; CLASSES]);
        }
        let n = &mut self.counts[block][class(self.status[i], self.mode[i])];
        *n = n.wrapping_add_signed(by);
    }

    /// The counts made again from the rows.
    fn recount(&mut self) {
        self.counts = vec![[0; CLASSES]; self.len().div_ceil(BLOCK)];
        for i in 0..self.len() {
            if self.live[i] {
                self.count(i, 1);
            }
        }
    }

    fn position(&self, id: i64) -> Option<usize> {
        self.ids.binary_search(&id).ok()
    }

    fn kill(&mut self, i: usize) {
        if self.live[i] {
            self.count(i, -1);
            self.live[i] = false;
            self.dead += 1;
        }
    }

    /// Takes `r`'s values into row `i`. An address that no longer fits its slot kills the row
    /// and answers false: it must be read again in its place.
    fn update(&mut self, i: usize, r: &Row) -> bool {
        let (start, end) = (self.starts[i] as usize, self.end(i));
        let slot = &mut self.buf[start..end];
        let key = r.key.as_bytes();
        let old_len = slot.iter().rposition(|&b| b != SEP).map_or(0, |p| p + 1);
        if &slot[..old_len] != key {
            // The slot keeps at least one separator after the address.
            if key.len() >= slot.len() {
                self.kill(i);
                return false;
            }
            slot[..key.len()].copy_from_slice(key);
            slot[key.len()..].fill(SEP);
        }
        if self.live[i] {
            self.count(i, -1);
        }
        self.status[i] = r.status;
        self.mode[i] = r.mode;
        self.bounce[i] = r.bounce;
        self.count(i, 1);
        if !self.live[i] {
            self.live[i] = true;
            self.dead -= 1;
        }
        true
    }

    /// Drops dead rows at the end, so that the highest id held is a live one.
    fn trim_dead_tail(&mut self) {
        while self.live.last() == Some(&false) {
            let start = self.starts.pop().expect("rows and starts go together") as usize;
            self.buf.truncate(start);
            self.ids.pop();
            self.status.pop();
            self.mode.pop();
            self.bounce.pop();
            self.live.pop();
            self.dead -= 1;
        }
        // Dead rows are not counted: only blocks left empty go.
        self.counts.truncate(self.len().div_ceil(BLOCK));
        self.max_id = self.ids.last().copied().unwrap_or(0);
    }

    /// Rebuilds the buffers from the live rows (dead ones take memory and scan time).
    fn compact(&mut self) {
        let mut out = Snapshot { built: self.built, seq: self.seq, ..Snapshot::default() };
        out.reserve(self.len() - self.dead, self.buf.len());
        for i in (0..self.len()).filter(|&i| self.live[i]) {
            let slot = &self.buf[self.starts[i] as usize..self.end(i)];
            let len = slot.iter().rposition(|&b| b != SEP).map_or(0, |p| p + 1);
            out.starts.push(out.buf.len() as u32);
            out.buf.extend_from_slice(&slot[..len]);
            out.buf.push(SEP);
            out.ids.push(self.ids[i]);
            out.status.push(self.status[i]);
            out.mode.push(self.mode[i]);
            out.bounce.push(self.bounce[i]);
            out.live.push(true);
        }
        out.max_id = out.ids.last().copied().unwrap_or(0);
        out.recount();
        *self = out;
    }

    fn reserve(&mut self, rows: usize, bytes: usize) {
        self.ids.reserve_exact(rows);
        self.starts.reserve_exact(rows);
        self.status.reserve_exact(rows);
        self.mode.reserve_exact(rows);
        self.bounce.reserve_exact(rows);
        self.live.reserve_exact(rows);
        self.counts.reserve_exact(rows.div_ceil(BLOCK));
        self.buf.reserve_exact(bytes);
    }

    /// Memory held, for the budget.
    fn bytes(&self) -> usize {
        self.buf.capacity()
            + self.ids.capacity() * 8
            + self.starts.capacity() * 4
            + self.bounce.capacity() * 4
            + self.status.capacity()
            + self.mode.capacity()
            + self.live.capacity()
            + self.counts.capacity() * std::mem::size_of::<[u32; CLASSES]>()
            + std::mem::size_of::<Self>()
    }

    fn freshness(&self, view: View) -> Freshness {
        // `seq` only grows. With the same `seq`, nothing was deleted or changed between the two
        // views, so the list's highest id only grew too.
        match (self.seq.cmp(&view.seq), self.max_id.cmp(&view.max_id)) {
            (std::cmp::Ordering::Greater, _) | (std::cmp::Ordering::Equal, std::cmp::Ordering::Greater) => {
                Freshness::Ahead
            }
            (std::cmp::Ordering::Equal, std::cmp::Ordering::Equal) => Freshness::Same,
            _ => Freshness::Behind,
        }
    }

    /// The rows whose address contains `needle` (lowercased) and that pass the other filters:
    /// how many, and the ids of those in `page`.
    fn search(&self, needle: &[u8], f: &MemberFilter, page: Page) -> Found {
        let mut found = Found { ids: Vec::new(), total: 0 };
        if needle.is_empty() || needle.contains(&SEP) {
            return found;
        }
        let (first, limit) = (page.offset(), u64::from(page.limit()));
        let finder = memchr::memmem::Finder::new(needle);
        let (mut at, mut row) = (0usize, 0usize);
        while let Some(hit) = finder.find(&self.buf[at..]).map(|h| at + h) {
            // Hits come in order: the row is at or after the cursor.
            row += self.starts[row..].partition_point(|&s| s as usize <= hit) - 1;
            at = self.end(row);
            let keep = self.live[row]
                && f.status.is_none_or(|s| s == self.status[row])
                && f.delivery_mode.is_none_or(|m| m == self.mode[row])
                && f.min_bounce_score.is_none_or(|b| self.bounce[row] >= b);
            if keep {
                if found.total >= first && found.total - first < limit {
                    found.ids.push(self.ids[row]);
                }
                found.total += 1;
            }
            if at >= self.buf.len() {
                break;
            }
        }
        found
    }
}

impl Snapshot {
    /// The id of the row at `offset` among those passing `f` (no needle); with `count_all`, also
    /// how many pass it (else the pass stops at the page).
    fn seek(&self, f: &MemberFilter, offset: u64, count_all: bool) -> PageStart {
        let plain = f.status.is_none() && f.delivery_mode.is_none() && f.min_bounce_score.is_none();
        if plain && self.dead == 0 {
            let first = usize::try_from(offset).ok().and_then(|o| self.ids.get(o)).copied();
            return PageStart { first, total: count_all.then_some(self.len() as u64) };
        }
        let keep = |i: usize| {
            self.live[i]
                && f.status.is_none_or(|s| s == self.status[i])
                && f.delivery_mode.is_none_or(|m| m == self.mode[i])
                && f.min_bounce_score.is_none_or(|b| self.bounce[i] >= b)
        };
        if !count_all && f.min_bounce_score.is_none() {
            // Status and mode only: whole blocks are skipped by their counts, then the rows of the
            // block the page starts in are read.
            let mut classes = [false; CLASSES];
            for s in MemberStatus::ALL.iter().filter(|s| f.status.is_none_or(|w| w == **s)) {
                for m in DeliveryMode::ALL.iter().filter(|m| f.delivery_mode.is_none_or(|w| w == **m)) {
                    classes[class(*s, *m)] = true;
                }
            }
            let mut n = 0u64;
            for (b, counts) in self.counts.iter().enumerate() {
                let here: u64 = counts.iter().zip(classes).filter(|(_, c)| *c).map(|(k, _)| u64::from(*k)).sum();
                if n + here <= offset {
                    n += here;
                    continue;
                }
                for i in b * BLOCK..self.len().min((b + 1) * BLOCK) {
                    if keep(i) {
                        if n == offset {
                            return PageStart { first: Some(self.ids[i]), total: None };
                        }
                        n += 1;
                    }
                }
            }
            return PageStart { first: None, total: None };
        }
        let (mut n, mut first) = (0u64, None);
        for i in 0..self.len() {
            if keep(i) {
                if n == offset {
                    first = Some(self.ids[i]);
                    if !count_all {
                        break;
                    }
                }
                n += 1;
            }
        }
        PageStart { first, total: count_all.then_some(n) }
    }
}

fn member_status(raw: &str) -> rusqlite::Result<MemberStatus> {
    MemberStatus::parse(raw).ok_or_else(|| super::access::corrupt("member status", raw))
}

fn delivery_mode(raw: &str) -> rusqlite::Result<DeliveryMode> {
    DeliveryMode::parse(raw).ok_or_else(|| super::access::corrupt("delivery mode", raw))
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok(Row {
        id: r.get(0)?,
        key: r.get(1)?,
        status: member_status(&r.get::<_, String>(2)?)?,
        mode: delivery_mode(&r.get::<_, String>(3)?)?,
        bounce: u32::try_from(r.get::<_, i64>(4)?).unwrap_or(0),
    })
}

const ROW_COLUMNS: &str = "id, email_key, status, delivery_mode, bounce_score";

fn read_view(conn: &Connection, list: i64) -> rusqlite::Result<View> {
    let seq: Option<i64> = conn
        .prepare_cached("SELECT seq FROM sqlite_sequence WHERE name = 'member_changes'")?
        .query_row([], |r| r.get(0))
        .optional()?;
    // `members_list` is (list_id, rowid): one seek.
    let max_id: Option<i64> =
        conn.prepare_cached("SELECT max(id) FROM members WHERE list_id = ?1")?.query_row([list], |r| r.get(0))?;
    Ok(View { seq: seq.unwrap_or(0), max_id: max_id.unwrap_or(0) })
}

enum Refresh {
    Done,
    Rebuild,
}

impl Snapshot {
    /// Reads the whole list in the view `view` of `conn`.
    fn build(conn: &Connection, list: i64, view: View) -> Result<Result<Self, TooBig>, rusqlite::Error> {
        let mut snap = Snapshot { seq: view.seq, ..Snapshot::default() };
        let mut st =
            conn.prepare_cached(&format!("SELECT {ROW_COLUMNS} FROM members WHERE list_id = ?1 ORDER BY id"))?;
        let mut rows = st.query([list])?;
        while let Some(r) = rows.next()? {
            if snap.push(&row(r)?).is_err() {
                return Ok(Err(TooBig));
            }
        }
        snap.built = true;
        Ok(Ok(snap))
    }

    /// Brings a snapshot that is behind up to `view`, or says that a rebuild is needed.
    fn refresh(
        &mut self,
        conn: &Connection,
        list: i64,
        view: View,
    ) -> Result<Result<Refresh, TooBig>, rusqlite::Error> {
        let mut read_again: Vec<i64> = Vec::new();
        if view.seq > self.seq {
            if view.seq - self.seq > MAX_PENDING {
                return Ok(Ok(Refresh::Rebuild));
            }
            // Entries are numbered without gaps and pruned oldest first: the first one after ours
            // must still be there.
            let oldest: Option<i64> =
                conn.prepare_cached("SELECT min(seq) FROM member_changes")?.query_row([], |r| r.get(0))?;
            if oldest.is_none_or(|o| o > self.seq + 1) {
                return Ok(Ok(Refresh::Rebuild));
            }
            let changed: Vec<i64> = conn
                .prepare_cached(
                    "SELECT DISTINCT member_id FROM member_changes WHERE seq > ?1 AND list_id = ?2 ORDER BY member_id",
                )?
                .query_map([self.seq, list], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            let mut st = conn.prepare_cached(&format!("SELECT {ROW_COLUMNS}, list_id FROM members WHERE id = ?1"))?;
            for id in changed {
                let now: Option<(Row, i64)> = st.query_row([id], |r| Ok((row(r)?, r.get(5)?))).optional()?;
                let now = now.filter(|(_, l)| *l == list).map(|(r, _)| r);
                match (self.position(id), now) {
                    (Some(i), Some(r)) => {
                        if !self.update(i, &r) {
                            read_again.push(id);
                        }
                    }
                    (Some(i), None) => self.kill(i),
                    // Moved into this list, or a reused id: fine if it comes after every live row.
                    (None, Some(_)) => read_again.push(id),
                    (None, None) => {}
                }
            }
        }
        self.trim_dead_tail();
        if read_again.iter().any(|&id| id <= self.max_id) {
            return Ok(Ok(Refresh::Rebuild));
        }
        let mut st = conn
            .prepare_cached(&format!("SELECT {ROW_COLUMNS} FROM members WHERE list_id = ?1 AND id > ?2 ORDER BY id"))?;
        let mut rows = st.query([list, self.max_id])?;
        while let Some(r) = rows.next()? {
            if self.push(&row(r)?).is_err() {
                return Ok(Err(TooBig));
            }
        }
        if self.dead > 0 && self.dead * DEAD_SHARE > self.len() {
            self.compact();
        }
        self.seq = view.seq;
        if self.max_id != view.max_id {
            // Cannot happen if the log is complete; a rebuild is always right.
            tracing::warn!(list, held = self.max_id, seen = view.max_id, "search snapshot out of step: rebuilt");
            return Ok(Ok(Refresh::Rebuild));
        }
        Ok(Ok(Refresh::Done))
    }
}

/// The snapshots of one database file, shared by every connection of the process to it.
#[derive(Debug, Default)]
pub struct SearchCache {
    limits: Mutex<SearchLimits>,
    lists: Mutex<Lists>,
    /// Snapshots read whole from SQLite (first searches and rebuilds), for tests and logs.
    builds: std::sync::atomic::AtomicU64,
}

#[derive(Debug, Default)]
struct Lists {
    slots: HashMap<i64, Slot>,
    clock: u64,
    /// Lists whose snapshot alone would pass the budget: searched by SQL.
    too_big: HashSet<i64>,
}

#[derive(Debug)]
struct Slot {
    snap: Arc<Mutex<Snapshot>>,
    used: u64,
    bytes: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SearchCache {
    pub(super) fn set_limits(&self, limits: SearchLimits) {
        *lock(&self.limits) = limits;
        let mut lists = lock(&self.lists);
        lists.too_big.clear();
        lists.evict(limits.budget_bytes, None);
    }

    /// Memory held by snapshots now, and how many lists have one.
    pub(super) fn usage(&self) -> (usize, usize) {
        let lists = lock(&self.lists);
        (lists.slots.values().map(|s| s.bytes).sum(), lists.slots.len())
    }

    /// Answers `ask` from the list's snapshot, building or refreshing it in `conn`'s read
    /// transaction; `None` when SQL must answer (small list, snapshot ahead of this view, budget).
    fn with_snapshot<R>(
        &self,
        conn: &Connection,
        list: i64,
        ask: impl FnOnce(&Snapshot) -> R,
    ) -> Result<Option<R>, rusqlite::Error> {
        let limits = *lock(&self.limits);
        if limits.budget_bytes == 0 {
            return Ok(None);
        }
        let slot = {
            let mut lists = lock(&self.lists);
            if lists.too_big.contains(&list) {
                return Ok(None);
            }
            lists.clock += 1;
            let clock = lists.clock;
            lists.slots.get_mut(&list).map(|s| {
                s.used = clock;
                Arc::clone(&s.snap)
            })
        };
        let slot = match slot {
            Some(s) => s,
            None => {
                let members: i64 = conn
                    .prepare_cached("SELECT COALESCE(SUM(n), 0) FROM member_tallies WHERE list_id = ?1")?
                    .query_row([list], |r| r.get(0))?;
                if u64::try_from(members).unwrap_or(0) < limits.min_members {
                    return Ok(None);
                }
                let mut lists = lock(&self.lists);
                let used = lists.clock;
                let s = lists.slots.entry(list).or_insert_with(|| Slot { snap: Arc::default(), used, bytes: 0 });
                Arc::clone(&s.snap)
            }
        };
        let (found, bytes) = {
            let mut snap = match slot.lock() {
                Ok(g) => g,
                Err(poisoned) => {
                    // A panic in the middle of a refresh: start over.
                    slot.clear_poison();
                    let mut g = poisoned.into_inner();
                    *g = Snapshot::default();
                    g
                }
            };
            let view = read_view(conn, list)?;
            let usable = match self.bring_to(&mut snap, conn, list, view)? {
                Ok(usable) => usable,
                Err(TooBig) => {
                    *snap = Snapshot::default();
                    drop(snap);
                    let mut lists = lock(&self.lists);
                    lists.slots.remove(&list);
                    lists.too_big.insert(list);
                    return Ok(None);
                }
            };
            if !usable {
                return Ok(None);
            }
            (ask(&snap), snap.bytes())
        };
        let mut lists = lock(&self.lists);
        if let Some(s) = lists.slots.get_mut(&list).filter(|s| Arc::ptr_eq(&s.snap, &slot)) {
            s.bytes = bytes;
        }
        if bytes > limits.budget_bytes {
            lists.slots.remove(&list);
            lists.too_big.insert(list);
            tracing::info!(list, bytes, budget = limits.budget_bytes, "search snapshot over the budget alone: dropped");
        } else {
            lists.evict(limits.budget_bytes, Some(list));
        }
        Ok(Some(found))
    }

    /// Builds or refreshes `snap` to `view`; false when it is ahead of the view (SQL answers).
    fn bring_to(
        &self,
        snap: &mut Snapshot,
        conn: &Connection,
        list: i64,
        view: View,
    ) -> Result<Result<bool, TooBig>, rusqlite::Error> {
        if snap.built {
            match snap.freshness(view) {
                Freshness::Same => return Ok(Ok(true)),
                Freshness::Ahead => return Ok(Ok(false)),
                Freshness::Behind => {
                    // Unusable until the refresh is complete: an error leaves it to be rebuilt.
                    snap.built = false;
                    match snap.refresh(conn, list, view)? {
                        Err(TooBig) => return Ok(Err(TooBig)),
                        Ok(Refresh::Done) => {
                            snap.built = true;
                            return Ok(Ok(true));
                        }
                        Ok(Refresh::Rebuild) => {}
                    }
                }
            }
        }
        let started = std::time::Instant::now();
        match Snapshot::build(conn, list, view)? {
            Err(TooBig) => Ok(Err(TooBig)),
            Ok(built) => {
                *snap = built;
                self.builds.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::info!(
                    list,
                    rows = snap.len(),
                    bytes = snap.bytes(),
                    ms = started.elapsed().as_millis() as u64,
                    "search snapshot built"
                );
                Ok(Ok(true))
            }
        }
    }
}

impl Lists {
    /// Drops the least recently searched snapshots (never `keep`) until all fit in `budget`.
    fn evict(&mut self, budget: usize, keep: Option<i64>) {
        let mut total: usize = self.slots.values().map(|s| s.bytes).sum();
        while total > budget {
            let Some((&victim, slot)) =
                self.slots.iter().filter(|(id, _)| Some(**id) != keep).min_by_key(|(_, s)| s.used)
            else {
                break;
            };
            total -= slot.bytes;
            self.slots.remove(&victim);
        }
    }
}

/// The caches of the database files this process has open, by SQLite's own name of the file, so
/// that a transaction finds its store's cache from its connection.
static REGISTRY: Mutex<Vec<(String, Weak<SearchCache>)>> = Mutex::new(Vec::new());

/// The cache of the file `conn` is open on, made if needed; the store keeps it alive.
pub(super) fn register(conn: &Connection) -> Arc<SearchCache> {
    let mut reg = lock(&REGISTRY);
    reg.retain(|(_, w)| w.strong_count() > 0);
    let Some(path) = conn.path().filter(|p| !p.is_empty()) else { return Arc::default() };
    if let Some(found) = reg.iter().find(|(p, _)| p == path).and_then(|(_, w)| w.upgrade()) {
        return found;
    }
    let cache = Arc::new(SearchCache::default());
    reg.push((path.to_owned(), Arc::downgrade(&cache)));
    cache
}

fn cache_of(conn: &Connection) -> Option<Arc<SearchCache>> {
    let path = conn.path().filter(|p| !p.is_empty())?;
    lock(&REGISTRY).iter().find(|(p, _)| p == path).and_then(|(_, w)| w.upgrade())
}

/// The cache of `conn`'s file when a snapshot may answer in its transaction: never inside a write
/// transaction, whose view holds uncommitted rows a shared snapshot must never take in.
fn usable_cache(conn: &Connection) -> Result<Option<Arc<SearchCache>>, StoreError> {
    let Some(cache) = cache_of(conn) else { return Ok(None) };
    let state = conn.transaction_state(Some(rusqlite::MAIN_DB)).map_err(map_err)?;
    Ok((state != rusqlite::TransactionState::Write).then_some(cache))
}

/// A search with `email_contains` answered by the list's snapshot, or `None`: SQL answers.
pub(super) fn search(
    conn: &Connection,
    list: ListId,
    filter: &MemberFilter,
    page: Page,
) -> Result<Option<Found>, StoreError> {
    let Some(needle) = filter.email_contains.as_deref().filter(|n| !n.is_empty()) else { return Ok(None) };
    let Some(cache) = usable_cache(conn)? else { return Ok(None) };
    cache.with_snapshot(conn, list.get(), |s| s.search(needle.as_bytes(), filter, page)).map_err(map_err)
}

/// Where a deep page without `email_contains` starts, from the list's snapshot; `None`: SQL's
/// `OFFSET` answers (a shallow page, a small list, no snapshot usable in this view).
pub(super) fn page_start(
    conn: &Connection,
    list: ListId,
    filter: &MemberFilter,
    page: Page,
) -> Result<Option<PageStart>, StoreError> {
    if filter.email_contains.is_some() {
        return Ok(None);
    }
    let Some(cache) = usable_cache(conn)? else { return Ok(None) };
    if page.offset() < lock(&cache.limits).deep_offset {
        return Ok(None);
    }
    let count_all = filter.min_bounce_score.is_some();
    cache.with_snapshot(conn, list.get(), |s| s.seek(filter, page.offset(), count_all)).map_err(map_err)
}

#[cfg(test)]
mod tests;
