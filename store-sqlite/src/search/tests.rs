use super::*;
use crate::SqliteStore;
use std::sync::atomic::Ordering;

// ---- The scan, on snapshots made in memory ----

fn r(id: i64, key: &str) -> Row {
    Row { id, key: key.into(), status: MemberStatus::Active, mode: DeliveryMode::Regular, bounce: 0 }
}

fn snapshot(rows: &[Row]) -> Snapshot {
    let mut s = Snapshot { built: true, ..Snapshot::default() };
    for row in rows {
        s.push(row).unwrap();
    }
    s
}

fn contains(needle: &str) -> MemberFilter {
    MemberFilter { email_contains: Some(needle.into()), ..MemberFilter::default() }
}

fn page(limit: &str, offset: &str) -> Page {
    Page::parse(Some(limit), Some(offset)).unwrap()
}

/// The ids and total the snapshot answers for `f` on its first page of 50.
fn check(s: &Snapshot, f: &MemberFilter, ids: &[i64], total: u64) {
    let found = s.search(f.email_contains.as_deref().unwrap().as_bytes(), f, Page::default());
    assert_eq!(found, Found { ids: ids.to_vec(), total }, "{f:?}");
}

#[test]
fn a_hit_is_its_row_and_no_match_spans_two_rows() {
    let s = snapshot(&[r(3, "ann@a.org"), r(7, "bob@b.net"), r(9, "org@c.fr")]);
    check(&s, &contains("org"), &[3, 9], 2);
    check(&s, &contains("ann@"), &[3], 1);
    check(&s, &contains(".fr"), &[9], 1);
    check(&s, &contains("gbob"), &[], 0); // "...a.org" + "bob..." joined
    check(&s, &contains("g\0b"), &[], 0); // the separator itself
    check(&s, &contains("zz"), &[], 0);
    check(&s, &contains("ann@a.org"), &[3], 1);
}

#[test]
fn a_row_with_several_hits_counts_once() {
    let s = snapshot(&[r(1, "aa.aa@aa.aa"), r(2, "bb@aa.net"), r(5, "cc@dd.org")]);
    check(&s, &contains("aa"), &[1, 2], 2);
    check(&s, &contains("a"), &[1, 2], 2);
}

#[test]
fn the_other_filters_apply_to_the_hits() {
    let mut rows = vec![r(1, "x1@ex.org"), r(2, "x2@ex.org"), r(3, "x3@ex.org"), r(4, "y4@ex.org")];
    rows[1].status = MemberStatus::Removed;
    rows[2].mode = DeliveryMode::Digest;
    rows[2].bounce = 7;
    rows[3].bounce = 9;
    let s = snapshot(&rows);
    let active = MemberFilter { status: Some(MemberStatus::Active), ..contains("x") };
    check(&s, &active, &[1, 3, 4], 3);
    check(&s, &MemberFilter { delivery_mode: Some(DeliveryMode::Digest), ..contains("ex") }, &[3], 1);
    check(&s, &MemberFilter { min_bounce_score: Some(7), ..contains("@ex") }, &[3, 4], 2);
    check(&s, &MemberFilter { min_bounce_score: Some(8), ..active.clone() }, &[4], 1);
    check(&s, &MemberFilter { min_bounce_score: Some(10), ..active }, &[], 0);
}

#[test]
fn pages_keep_their_window_and_the_total_counts_all() {
    let rows: Vec<Row> = (1..=20).map(|i| r(i * 10, &format!("m{i}@ex.org"))).collect();
    let s = snapshot(&rows);
    let f = contains("m1");
    // m1, m10..m19
    assert_eq!(s.search(b"m1", &f, page("3", "0")), Found { ids: vec![10, 100, 110], total: 11 });
    assert_eq!(s.search(b"m1", &f, page("3", "9")), Found { ids: vec![180, 190], total: 11 });
    assert_eq!(s.search(b"m1", &f, page("3", "11")), Found { ids: vec![], total: 11 });
    assert_eq!(s.search(b"m1", &f, page("500", "99999")), Found { ids: vec![], total: 11 });
}

#[test]
fn dead_rows_are_skipped_trimmed_and_compacted() {
    let mut s = snapshot(&[r(1, "a@ex.org"), r(2, "b@ex.org"), r(3, "c@ex.org"), r(4, "d@ex.org")]);
    s.kill(1);
    s.kill(3);
    check(&s, &contains("ex"), &[1, 3], 2);
    s.trim_dead_tail();
    assert_eq!((s.len(), s.max_id, s.dead), (3, 3, 1));
    s.compact();
    assert_eq!((s.ids.clone(), s.dead, s.max_id), (vec![1, 3], 0, 3));
    check(&s, &contains("@ex.org"), &[1, 3], 2);
    assert_eq!(s.buf, b"a@ex.org\0c@ex.org\0");
}

#[test]
fn a_changed_address_is_rewritten_in_its_slot_when_it_fits() {
    let mut s = snapshot(&[r(1, "long.name@ex.org"), r(2, "b@ex.org")]);
    assert!(s.update(0, &r(1, "short@ex.org")));
    check(&s, &contains("short"), &[1], 1);
    check(&s, &contains("long"), &[], 0);
    check(&s, &contains("org"), &[1, 2], 2);
    // Padding is separators: the next row still maps to itself.
    check(&s, &contains("b@"), &[2], 1);
    assert!(s.update(0, &r(1, "long.name@ex.org")), "back to the slot's full length");
    assert!(!s.update(1, &r(2, "much.longer@ex.org")), "does not fit: read again");
    assert_eq!(s.dead, 1);
    s.compact();
    assert_eq!(s.buf, b"long.name@ex.org\0");
}

#[test]
fn freshness_compares_the_log_then_the_highest_id() {
    let s = Snapshot { built: true, seq: 10, max_id: 100, ..Snapshot::default() };
    let fresh = |seq, max_id| s.freshness(View { seq, max_id });
    assert!(matches!(fresh(10, 100), Freshness::Same));
    assert!(matches!(fresh(10, 101), Freshness::Behind));
    assert!(matches!(fresh(11, 50), Freshness::Behind), "a deletion lowered the highest id");
    assert!(matches!(fresh(10, 99), Freshness::Ahead));
    assert!(matches!(fresh(9, 500), Freshness::Ahead));
}

#[test]
fn eviction_drops_the_least_recently_searched_first() {
    let mut lists = Lists::default();
    for (id, used) in [(1, 5), (2, 1), (3, 9)] {
        lists.slots.insert(id, Slot { snap: Arc::default(), used, bytes: 100 });
    }
    lists.evict(250, Some(3));
    assert_eq!(sorted_keys(&lists), vec![1, 3], "list 2 was the least recently used");
    lists.evict(50, Some(1));
    assert_eq!(sorted_keys(&lists), vec![1], "the one being searched stays");
}

fn sorted_keys(lists: &Lists) -> Vec<i64> {
    let mut keys: Vec<i64> = lists.slots.keys().copied().collect();
    keys.sort_unstable();
    keys
}

// ---- Against SQLite: freshness across connections (another process), the view rules ----

/// A store whose lists all get a snapshot, and a connection of its own that plays another process.
struct Fixture {
    _dir: tempfile::TempDir,
    store: SqliteStore,
    other: Connection,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = SqliteStore::open(&path, 0).unwrap();
    store.set_search_limits(SearchLimits { min_members: 1, budget_bytes: 64 << 20, ..SearchLimits::default() });
    let other = Connection::open(&path).unwrap();
    other.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
    other
        .execute_batch(
            "INSERT INTO domains (id, name, status, default_subscription_policy, created_at, updated_at)
               VALUES (1, 'example.org', 'active', 'open', 0, 0);
             INSERT INTO lists (id, domain_id, name, display_name, kind, status, subscription_policy, posting_policy,
               reply_to, bounce_disable_score, digest_frequency, max_message_kb, created_at, updated_at)
               VALUES (1, 1, 'news', 'News', 'discussion', 'active', 'open', 'members', 'list', 5, 'daily', 100, 0, 0),
                      (2, 1, 'jobs', 'Jobs', 'discussion', 'active', 'open', 'members', 'list', 5, 'daily', 100, 0, 0);",
        )
        .unwrap();
    Fixture { _dir: dir, store, other }
}

impl Fixture {
    fn add(&self, list: i64, email: &str) -> i64 {
        self.other
            .execute(
                "INSERT INTO members (list_id, email, email_key, status, delivery_mode, created_at, updated_at)
                 VALUES (?1, ?2, lower(?2), 'active', 'regular', 0, 0)",
                rusqlite::params![list, email],
            )
            .unwrap();
        let id = self.other.last_insert_rowid();
        // The adapter counts the members it inserts (migration 12); a bare INSERT does it too.
        self.other
            .execute(
                "INSERT INTO member_tallies (list_id, status, delivery_mode, n) VALUES (?1, 'active', 'regular', 1)
                 ON CONFLICT (list_id, status, delivery_mode) DO UPDATE SET n = n + 1",
                [list],
            )
            .unwrap();
        id
    }

    fn sql(&self, sql: &str) {
        self.other.execute_batch(sql).unwrap();
    }

    fn builds(&self) -> u64 {
        self.store.search.builds.load(Ordering::Relaxed)
    }

    /// The listing through the store: ids of the page and total.
    fn listing(&self, list: i64, f: &MemberFilter, page: Page) -> (Vec<i64>, u64) {
        let mut tx = super::super::tests::mailing(&self.store).read().unwrap();
        let out = tx.list_members(ListId::from_stored(list), f, page).unwrap();
        (out.items.iter().map(|m| m.id.get()).collect(), out.total)
    }

    /// The same listing in SQL with `instr`, on the other connection.
    fn expected(&self, list: i64, f: &MemberFilter, page: Page) -> (Vec<i64>, u64) {
        let all: Vec<i64> = self
            .other
            .prepare(
                "SELECT id FROM members WHERE list_id = ?1 AND instr(email_key, ?2) > 0
                   AND (?3 IS NULL OR status = ?3) AND (?4 IS NULL OR delivery_mode = ?4)
                   AND (?5 IS NULL OR bounce_score >= ?5) ORDER BY id",
            )
            .unwrap()
            .query_map(
                rusqlite::params![
                    list,
                    f.email_contains,
                    f.status.map(MemberStatus::as_str),
                    f.delivery_mode.map(DeliveryMode::as_str),
                    f.min_bounce_score
                ],
                |r| r.get(0),
            )
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let ids = all.iter().copied().skip(page.offset() as usize).take(page.limit() as usize).collect();
        (ids, all.len() as u64)
    }

    fn agrees(&self, list: i64, f: &MemberFilter) {
        for p in [Page::default(), page("2", "1"), page("3", "4")] {
            assert_eq!(self.listing(list, f, p), self.expected(list, f, p), "{f:?} {p:?}");
        }
    }
}

#[test]
fn small_lists_are_searched_by_sql_and_big_ones_by_their_snapshot() {
    let fx = fixture();
    fx.store.set_search_limits(SearchLimits { min_members: 3, budget_bytes: 64 << 20, ..SearchLimits::default() });
    fx.add(1, "ann@ex.org");
    fx.add(1, "bob@ex.org");
    fx.agrees(1, &contains("ex"));
    assert_eq!(fx.store.search_usage().1, 0, "2 members: no snapshot");
    fx.add(1, "cat@ex.org");
    fx.agrees(1, &contains("ex"));
    assert_eq!((fx.builds(), fx.store.search_usage().1), (1, 1));
    fx.agrees(1, &contains("b@"));
    assert_eq!(fx.builds(), 1, "the second search reuses it");
    // Without a search the listing never touches the snapshot.
    let none = fx.listing(1, &MemberFilter::default(), Page::default());
    assert_eq!(none, (vec![1, 2, 3], 3));
}

#[test]
fn the_snapshot_follows_updates_deletions_and_inserts_without_a_rebuild() {
    let fx = fixture();
    let ids: Vec<i64> = ["ann@ex.org", "bob@ex.org", "cat@ex.org", "dan@ex.org"].iter().map(|e| fx.add(1, e)).collect();
    let other_list = fx.add(2, "eve@ex.org");
    fx.agrees(1, &contains("ex"));
    assert_eq!(fx.builds(), 1);

    fx.sql(&format!("UPDATE members SET status = 'removed' WHERE id = {}", ids[1]));
    fx.sql(&format!("UPDATE members SET delivery_mode = 'digest', bounce_score = 4 WHERE id = {}", ids[2]));
    let active = MemberFilter { status: Some(MemberStatus::Active), ..contains("@ex") };
    assert_eq!(fx.listing(1, &active, Page::default()), (vec![ids[0], ids[2], ids[3]], 3));
    fx.agrees(1, &MemberFilter { delivery_mode: Some(DeliveryMode::Digest), ..contains("@ex") });
    fx.agrees(1, &MemberFilter { min_bounce_score: Some(4), ..contains("@ex") });

    fx.sql(&format!("DELETE FROM members WHERE id = {}", ids[0]));
    let new = fx.add(1, "fay@ex.org");
    fx.agrees(1, &contains("ex"));
    assert_eq!(fx.listing(1, &contains("ex"), Page::default()).1, 4);

    // A member moved to the other list, and one moved in (its id below the list's highest).
    fx.sql(&format!("UPDATE members SET list_id = 2 WHERE id = {}", ids[3]));
    fx.agrees(1, &contains("ex"));
    fx.agrees(2, &contains("ex"));
    assert_eq!(fx.builds(), 2, "list 2's first search built its own");
    fx.sql(&format!("UPDATE members SET list_id = 1 WHERE id = {other_list}"));
    fx.agrees(1, &contains("ex"));
    fx.agrees(2, &contains("ex"));
    assert_eq!(fx.builds(), 3, "a row moved in below the highest id: list 1 was rebuilt");
    assert!(fx.listing(1, &contains("eve"), Page::default()).0 == vec![other_list] && new > other_list);
}

#[test]
fn a_reused_highest_id_is_read_again() {
    let fx = fixture();
    fx.add(1, "ann@ex.org");
    let last = fx.add(1, "bob@ex.org");
    fx.agrees(1, &contains("ex"));
    fx.sql(&format!("DELETE FROM members WHERE id = {last}"));
    let reused = fx.add(1, "a.much.longer.address@ex.org");
    assert_eq!(reused, last, "SQLite gives the highest rowid again");
    fx.agrees(1, &contains("ex"));
    fx.agrees(1, &contains("longer"));
    fx.agrees(1, &contains("bob"));
    // The same once more, the row landing in the other list.
    fx.sql(&format!("DELETE FROM members WHERE id = {last}"));
    assert_eq!(fx.add(2, "cat@ex.org"), last);
    fx.agrees(1, &contains("ex"));
    fx.agrees(2, &contains("ex"));
    fx.sql(&format!("DELETE FROM members WHERE id = {last}"));
    assert_eq!(fx.add(1, "dan@ex.org"), last);
    fx.agrees(1, &contains("ex"));
    assert_eq!(fx.builds(), 2, "list 1 was refreshed each time, never rebuilt");
}

#[test]
fn a_changed_address_is_found_under_its_new_value() {
    let fx = fixture();
    let a = fx.add(1, "first.long@ex.org");
    fx.add(1, "second@ex.org");
    fx.agrees(1, &contains("ex"));
    fx.sql(&format!("UPDATE members SET email = 'xy@ex.org', email_key = 'xy@ex.org' WHERE id = {a}"));
    fx.agrees(1, &contains("xy"));
    fx.agrees(1, &contains("first"));
    assert_eq!(fx.builds(), 1, "a shorter address fits its slot");
    fx.sql(&format!(
        "UPDATE members SET email = 'a.longer.one@ex.org', email_key = 'a.longer.one@ex.org' WHERE id = {a}"
    ));
    fx.agrees(1, &contains("longer"));
    fx.agrees(1, &contains("xy"));
    assert_eq!(fx.builds(), 2, "a longer one in the middle of the list: rebuilt");
}

#[test]
fn a_snapshot_ahead_of_the_view_leaves_the_answer_to_sql() {
    let fx = fixture();
    fx.add(1, "ann@ex.org");
    fx.add(1, "bob@ex.org");
    fx.agrees(1, &contains("ex"));
    // An older view: a read transaction that has read before the next commits.
    let mut old = super::super::tests::mailing(&fx.store).read().unwrap();
    let f = contains("ex");
    assert_eq!(old.list_members(ListId::from_stored(1), &f, Page::default()).unwrap().total, 2);
    fx.add(1, "cat@ex.org");
    assert_eq!(fx.listing(1, &f, Page::default()).1, 3, "a newer view refreshed the snapshot");
    let seen = old.list_members(ListId::from_stored(1), &f, Page::default()).unwrap();
    assert_eq!((seen.total, seen.items.len()), (2, 2), "the old view answers from its own data");
    fx.sql("UPDATE members SET status = 'removed' WHERE id = 1");
    let seen = old
        .list_members(
            ListId::from_stored(1),
            &MemberFilter { status: Some(MemberStatus::Active), ..f.clone() },
            Page::default(),
        )
        .unwrap();
    assert_eq!(seen.total, 2, "still the old view: the snapshot is ahead by the log too");
    drop(old);
    fx.agrees(1, &MemberFilter { status: Some(MemberStatus::Active), ..f });
}

#[test]
fn a_write_transaction_never_feeds_the_snapshot() {
    let fx = fixture();
    fx.add(1, "ann@ex.org");
    fx.agrees(1, &contains("ex"));
    {
        let mut tx = super::super::tests::mailing(&fx.store).write().unwrap();
        tx.insert_member(
            &courrier_core::mailing::model::NewMember {
                list_id: ListId::from_stored(1),
                email: courrier_core::kernel::EmailAddress::parse("bob@ex.org").unwrap(),
                display_name: None,
                status: MemberStatus::Active,
                pending_reason: None,
                delivery_mode: DeliveryMode::Regular,
                subscribed_at: None,
                consent_source: None,
                consent_at: None,
                consent_id: None,
            },
            courrier_core::kernel::Timestamp::from_unix_secs(1),
        )
        .unwrap();
        let inside = tx.list_members(ListId::from_stored(1), &contains("ex"), Page::default()).unwrap();
        assert_eq!(inside.total, 2, "the transaction sees its own row");
        // dropped: rolled back
    }
    fx.agrees(1, &contains("ex"));
    assert_eq!(fx.listing(1, &contains("ex"), Page::default()).1, 1);
}

#[test]
fn a_pruned_log_or_too_many_changes_rebuild() {
    let fx = fixture();
    for i in 0..10 {
        fx.add(1, &format!("m{i}@ex.org"));
    }
    fx.agrees(1, &contains("ex"));
    fx.sql("UPDATE members SET bounce_score = 1 WHERE id = 3");
    fx.sql("DELETE FROM member_changes");
    fx.agrees(1, &MemberFilter { min_bounce_score: Some(1), ..contains("ex") });
    assert_eq!(fx.builds(), 2, "its next entry was gone");
    fx.sql("UPDATE sqlite_sequence SET seq = seq + 60000 WHERE name = 'member_changes'");
    fx.sql("UPDATE members SET bounce_score = 2 WHERE id = 4");
    fx.agrees(1, &MemberFilter { min_bounce_score: Some(2), ..contains("ex") });
    assert_eq!(fx.builds(), 3, "60,000 entries behind");
}

#[test]
fn the_log_prunes_itself() {
    let fx = fixture();
    fx.sql(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 70000)
         INSERT INTO member_changes (list_id, member_id) SELECT 1, i FROM n;",
    );
    let (n, oldest, newest): (i64, i64, i64) = fx
        .other
        .query_row("SELECT count(*), min(seq), max(seq) FROM member_changes", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    assert_eq!(newest, 70_000);
    assert!((65_536..65_536 + 1024).contains(&n), "{n} entries kept");
    assert_eq!(newest - oldest + 1, n, "a prefix went, without gaps");
}

#[test]
fn the_budget_drops_the_least_recently_searched_list() {
    let fx = fixture();
    for i in 0..200 {
        fx.add(1, &format!("one.member.{i}@ex.org"));
        fx.add(2, &format!("two.member.{i}@ex.org"));
    }
    fx.agrees(1, &contains("member"));
    let (one, _) = fx.store.search_usage();
    fx.store.set_search_limits(SearchLimits { min_members: 1, budget_bytes: one + one / 2, ..SearchLimits::default() });
    fx.agrees(2, &contains("member"));
    assert_eq!(fx.store.search_usage().1, 1, "list 1 made room for list 2");
    assert!(!lock(&fx.store.search.lists).slots.contains_key(&1));
    fx.agrees(1, &contains("member"));
    assert!(!lock(&fx.store.search.lists).slots.contains_key(&2));
    // A list that alone passes the budget is searched by SQL from then on.
    fx.store.set_search_limits(SearchLimits { min_members: 1, budget_bytes: one / 2, ..SearchLimits::default() });
    fx.agrees(1, &contains("member"));
    fx.agrees(1, &contains("member"));
    assert_eq!(fx.store.search_usage(), (0, 0));
    assert_eq!(fx.builds(), 4, "built once more, found too big, never again");
}

/// A deterministic generator (xorshift64*): the same run every time.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, from: &'a [T]) -> &'a T {
        &from[self.below(from.len())]
    }
}

#[test]
fn random_changes_and_searches_agree_with_sql() {
    let fx = fixture();
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let locals = ["a", "b", "ab", "a_b", "a%b", "ba", "Abc", "x.y", "bb.a", "q1"];
    let domains = ["ab.org", "b-a.net", "x.fr", "aab.de"];
    let statuses = ["active", "disabled", "unsubscribed", "removed"];
    let modes = ["regular", "digest", "nomail"];
    let needles = ["ab", "a_", "%b", "b@", ".n", "org", "@x.fr", "abc", "zz", "a.", "b-a", "1@"];
    let mut n = 0;
    let mut address = |rng: &mut Rng| {
        n += 1;
        format!("{}{}@{}", rng.pick(&locals), n, rng.pick(&domains))
    };
    for _ in 0..300 {
        let e = address(&mut rng);
        fx.add(1 + rng.below(2) as i64, &e);
    }
    for round in 0..60 {
        for _ in 0..rng.below(12) {
            let max: i64 = fx.other.query_row("SELECT max(id) FROM members", [], |r| r.get(0)).unwrap();
            let id = 1 + rng.below(max as usize) as i64;
            // Address changes and moves between lists are rare (the product never makes them):
            // most of the time they cost a rebuild.
            match rng.below(20) {
                0..=6 => {
                    let e = address(&mut rng);
                    fx.add(1 + rng.below(2) as i64, &e);
                }
                7..=9 => fx.sql(&format!("UPDATE members SET status = '{}' WHERE id = {id}", rng.pick(&statuses))),
                10..=11 => {
                    fx.sql(&format!("UPDATE members SET delivery_mode = '{}' WHERE id = {id}", rng.pick(&modes)))
                }
                12..=13 => fx.sql(&format!("UPDATE members SET bounce_score = {} WHERE id = {id}", rng.below(5))),
                14..=17 => {
                    fx.sql(&format!("DELETE FROM members WHERE id = {}", if rng.below(2) == 0 { max } else { id }))
                }
                18 => {
                    let e = address(&mut rng);
                    fx.sql(&format!("UPDATE members SET email = '{e}', email_key = lower('{e}') WHERE id = {id}"));
                }
                _ => fx.sql(&format!("UPDATE members SET list_id = 3 - list_id WHERE id = {id}")),
            }
        }
        for _ in 0..4 {
            let list = 1 + rng.below(2) as i64;
            let f = MemberFilter {
                email_contains: Some((*rng.pick(&needles)).into()),
                status: [None, Some(MemberStatus::Active), Some(MemberStatus::Removed)][rng.below(3)],
                delivery_mode: [None, None, Some(DeliveryMode::Digest)][rng.below(3)],
                min_bounce_score: [None, None, Some(2)][rng.below(3)],
            };
            let p = page(&(1 + rng.below(20)).to_string(), &rng.below(40).to_string());
            assert_eq!(fx.listing(list, &f, p), fx.expected(list, &f, p), "round {round}: list {list} {f:?} {p:?}");
        }
        // Pages without a needle start from the same snapshot (its per-block counts follow every
        // change in place): the rows a plain scan gives at that offset.
        fx.store.set_search_limits(SearchLimits { min_members: 1, budget_bytes: 64 << 20, deep_offset: 0 });
        for _ in 0..3 {
            let list = 1 + rng.below(2) as i64;
            let f = MemberFilter {
                email_contains: None,
                status: [None, Some(MemberStatus::Active), Some(MemberStatus::Removed)][rng.below(3)],
                delivery_mode: [None, None, Some(DeliveryMode::Digest)][rng.below(3)],
                min_bounce_score: [None, None, Some(2)][rng.below(3)],
            };
            let all = plain_scan(&fx, list, &f);
            let (limit, offset) = (1 + rng.below(20), rng.below(all.len() + 5));
            let p = page(&limit.to_string(), &offset.to_string());
            let want = (all.iter().copied().skip(offset).take(limit).collect(), all.len() as u64);
            assert_eq!(fx.listing(list, &f, p), want, "round {round}: page of list {list} {f:?} {p:?}");
        }
    }
    let builds = fx.builds();
    assert!((2..30).contains(&builds), "refreshed in place most of the time: {builds} builds for 240 searches");
}

// ---- Every path of the listing against a plain scan ----

/// The rows of `list` read whole, filtered and ordered in Rust: what every path must answer.
fn plain_scan(fx: &Fixture, list: i64, f: &MemberFilter) -> Vec<i64> {
    let mut rows: Vec<(i64, String, String, String, i64)> = fx
        .other
        .prepare("SELECT id, email_key, status, delivery_mode, bounce_score FROM members WHERE list_id = ?1")
        .unwrap()
        .query_map([list], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    rows.sort_by_key(|r| r.0);
    rows.into_iter()
        .filter(|(_, key, status, mode, bounce)| {
            f.email_contains.as_deref().is_none_or(|n| key.contains(n))
                && f.status.is_none_or(|s| s.as_str() == status)
                && f.delivery_mode.is_none_or(|m| m.as_str() == mode)
                && f.min_bounce_score.is_none_or(|b| *bounce >= i64::from(b))
        })
        .map(|r| r.0)
        .collect()
}

/// Every id passing `f`, through the export's keyset (`members_after`), `chunk` at a time.
fn keyset_walk(fx: &Fixture, list: i64, f: &MemberFilter, chunk: u32) -> Vec<i64> {
    let (mut out, mut after) = (Vec::new(), None);
    loop {
        let mut tx = super::super::tests::mailing(&fx.store).read().unwrap();
        let rows = tx.members_after(ListId::from_stored(list), f, after, chunk).unwrap();
        let Some(last) = rows.last() else { return out };
        after = Some(last.id);
        out.extend(rows.iter().map(|m| m.id.get()));
    }
}

#[test]
fn the_listing_answers_the_same_members_in_the_same_order_through_every_path() {
    let fx = fixture();
    let mut rng = Rng(0x0ff5_e7ca_5e11_0018);
    let statuses = [
        ("active", "NULL"),
        ("pending", "'confirmation'"),
        ("pending", "'moderation'"),
        ("disabled", "NULL"),
        ("unsubscribed", "NULL"),
        ("removed", "NULL"),
    ];
    let modes = ["regular", "digest", "nomail"];
    let locals = ["ann", "bob", "a_b", "a%b", "Cat", "x.y", "dan"];
    let domains = ["ab.org", "b-a.net", "x.fr"];
    for n in 0..1_500 {
        let list = if rng.below(5) == 0 { 2 } else { 1 };
        let (status, reason) = *rng.pick(&statuses);
        let mode = *rng.pick(&modes);
        let email = format!("{}{n}@{}", rng.pick(&locals), rng.pick(&domains));
        fx.sql(&format!(
            "INSERT INTO members (list_id, email, email_key, status, pending_reason, delivery_mode, bounce_score,
               created_at, updated_at)
             VALUES ({list}, '{email}', lower('{email}'), '{status}', {reason}, '{mode}', {}, 0, 0)",
            rng.below(4)
        ));
        // Some holes in the ids, as deletions leave them.
        if rng.below(10) == 0 {
            let max: i64 = fx.other.query_row("SELECT max(id) FROM members", [], |r| r.get(0)).unwrap();
            let id = 1 + rng.below(max as usize) as i64;
            fx.sql(&format!("DELETE FROM members WHERE id = {id}"));
        }
    }
    // The adapter counts the members it inserts (migration 12); bare INSERTs do not: count them.
    fx.sql(
        "DELETE FROM member_tallies;
         INSERT INTO member_tallies (list_id, status, delivery_mode, n)
           SELECT list_id, status, delivery_mode, count(*) FROM members GROUP BY list_id, status, delivery_mode;",
    );
    let sql_only = SearchLimits { min_members: 1, budget_bytes: 0, ..SearchLimits::default() };
    let snapshots = SearchLimits { min_members: 1, budget_bytes: 64 << 20, deep_offset: 0 };
    let all_statuses = [
        None,
        Some(MemberStatus::Active),
        Some(MemberStatus::Pending),
        Some(MemberStatus::Disabled),
        Some(MemberStatus::Unsubscribed),
        Some(MemberStatus::Removed),
    ];
    let all_modes = [None, Some(DeliveryMode::Regular), Some(DeliveryMode::Digest), Some(DeliveryMode::Nomail)];
    let needles = [None, None, Some("ab"), Some("a_"), Some("%b"), Some("@x.fr"), Some("1"), Some("zz")];
    for case in 0..200 {
        let list = 1 + rng.below(2) as i64;
        let f = MemberFilter {
            status: *rng.pick(&all_statuses),
            delivery_mode: *rng.pick(&all_modes),
            min_bounce_score: [None, None, Some(1), Some(3)][rng.below(4)],
            email_contains: rng.pick(&needles).map(str::to_owned),
        };
        let expected = plain_scan(&fx, list, &f);
        assert_eq!(keyset_walk(&fx, list, &f, 1 + rng.below(60) as u32), expected, "case {case}: keyset {f:?}");
        let limit = 1 + rng.below(500);
        let offset = rng.below(expected.len() + 20);
        let p = page(&limit.to_string(), &offset.to_string());
        let want: Vec<i64> = expected.iter().copied().skip(offset).take(limit).collect();
        let want = (want, expected.len() as u64);
        fx.store.set_search_limits(sql_only);
        assert_eq!(fx.listing(list, &f, p), want, "case {case}: SQL offset {f:?} {p:?}");
        fx.store.set_search_limits(snapshots);
        assert_eq!(fx.listing(list, &f, p), want, "case {case}: snapshot (substring or page start) {f:?} {p:?}");
    }
}

#[test]
fn a_deep_page_starts_from_the_snapshot_and_a_shallow_one_from_sql() {
    let fx = fixture();
    fx.store.set_search_limits(SearchLimits { min_members: 1, budget_bytes: 64 << 20, deep_offset: 3 });
    let ids: Vec<i64> = (0..6).map(|i| fx.add(1, &format!("m{i}@ex.org"))).collect();
    assert_eq!(fx.listing(1, &MemberFilter::default(), page("2", "2")), (ids[2..4].to_vec(), 6));
    assert_eq!(fx.builds(), 0, "offset 2: SQL");
    assert_eq!(fx.listing(1, &MemberFilter::default(), page("2", "3")), (ids[3..5].to_vec(), 6));
    assert_eq!(fx.builds(), 1, "offset 3: the snapshot");
    fx.sql(&format!("DELETE FROM members WHERE id = {}", ids[1]));
    assert_eq!(fx.listing(1, &MemberFilter::default(), page("2", "3")), (ids[4..6].to_vec(), 5));
    assert_eq!(fx.listing(1, &MemberFilter::default(), page("2", "9")), (vec![], 5));
    assert_eq!(fx.builds(), 1, "refreshed, not rebuilt");
}
