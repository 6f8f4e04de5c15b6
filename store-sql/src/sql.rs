//! The one statement set's dialect layer (issue 38): what a repository written once needs from
//! either database, and nothing of either's crate.
//!
//! A shared statement is SQL text both databases run as it is: placeholders in SQLite's numbered
//! form (`?1`, `?2`, ...; the PostgreSQL adapter rewrites them to `$1`, `$2` once per statement
//! text, when it prepares it), the common subset of types (64-bit integers, text, bytes, booleans,
//! NULL; timestamps are integer microseconds), and the clauses both parse alike (`ON CONFLICT ...
//! DO UPDATE SET x = excluded.x`, `RETURNING`, `LIMIT`/`OFFSET`, row values). Where SQL differs
//! (JSON and time functions, locking clauses, a type of its own), the repository asks
//! [`SqlTx::dialect`] and writes each form beside the other, in the same file.
//!
//! Arguments are [`Arg`]s and columns are read through [`SqlRow`], so a row decoder is written
//! once: each adapter converts an `Arg` to its driver's parameter type (PostgreSQL by the column's
//! declared type: an `Arg::I64` binds to `INTEGER` or `BIGINT`, an `Arg::Bool` to `BOOLEAN`) and
//! reads a column by the accessor's type.

use courrier_core::storage::StoreError;

/// Which database a statement runs on, for the few statements whose text differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

/// A value bound to a placeholder.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arg<'a> {
    Null,
    I64(i64),
    Text(&'a str),
    Bytes(&'a [u8]),
    Bool(bool),
}

impl From<i64> for Arg<'_> {
    fn from(v: i64) -> Self {
        Arg::I64(v)
    }
}

impl From<u32> for Arg<'_> {
    fn from(v: u32) -> Self {
        Arg::I64(i64::from(v))
    }
}

impl From<u16> for Arg<'_> {
    fn from(v: u16) -> Self {
        Arg::I64(i64::from(v))
    }
}

impl From<bool> for Arg<'_> {
    fn from(v: bool) -> Self {
        Arg::Bool(v)
    }
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(v: &'a str) -> Self {
        Arg::Text(v)
    }
}

impl<'a> From<&'a String> for Arg<'a> {
    fn from(v: &'a String) -> Self {
        Arg::Text(v)
    }
}

impl<'a> From<&'a [u8]> for Arg<'a> {
    fn from(v: &'a [u8]) -> Self {
        Arg::Bytes(v)
    }
}

impl<'a, T: Into<Arg<'a>>> From<Option<T>> for Arg<'a> {
    fn from(v: Option<T>) -> Self {
        v.map_or(Arg::Null, Into::into)
    }
}

/// One row of a result, its columns read by position. A value of another type than asked, or a
/// NULL where none may be, is the schema's fault: an error, never a panic.
pub trait SqlRow {
    fn i64(&self, i: usize) -> Result<i64, StoreError>;
    fn opt_i64(&self, i: usize) -> Result<Option<i64>, StoreError>;
    fn text(&self, i: usize) -> Result<String, StoreError>;
    fn opt_text(&self, i: usize) -> Result<Option<String>, StoreError>;
    fn bytes(&self, i: usize) -> Result<Vec<u8>, StoreError>;
    fn bool(&self, i: usize) -> Result<bool, StoreError>;
}

/// A transaction as a shared repository uses it. `sql` is a shared statement (module doc).
pub trait SqlTx {
    fn dialect(&self) -> Dialect;

    /// Runs a statement that returns no rows; how many rows it changed.
    fn run(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<u64, StoreError>;

    /// Every row of a query, each decoded by `row`.
    fn rows<T>(
        &mut self,
        sql: &str,
        args: &[Arg<'_>],
        row: impl FnMut(&dyn SqlRow) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError>;

    /// The first row of a query, if any, decoded by `row`.
    fn first<T>(
        &mut self,
        sql: &str,
        args: &[Arg<'_>],
        row: impl FnOnce(&dyn SqlRow) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError>;
}

/// A stored value that does not parse: the database was edited by hand or is corrupt.
pub fn corrupt(what: &str, value: &str) -> StoreError {
    StoreError::Backend(format!("the database holds an invalid {what}: {value:?}"))
}

/// A timestamp column that may be NULL.
pub fn ts(v: Option<i64>) -> Option<courrier_core::kernel::Timestamp> {
    v.map(courrier_core::kernel::Timestamp::from_unix_micros)
}

/// A page of a listing: `count_sql` (one integer) and `select_sql` (ending before its `LIMIT`)
/// share `args`; the window's two placeholders are numbered after them.
pub fn paged<T>(
    tx: &mut impl SqlTx,
    count_sql: &str,
    select_sql: &str,
    args: &[Arg<'_>],
    page: courrier_core::kernel::Page,
    row: impl FnMut(&dyn SqlRow) -> Result<T, StoreError>,
) -> Result<courrier_core::kernel::Paged<T>, StoreError> {
    let total = tx.first(count_sql, args, |r| r.i64(0))?.unwrap_or(0);
    let mut window = args.to_vec();
    window.push(page.limit().into());
    window.push(i64::try_from(page.offset()).unwrap_or(i64::MAX).into());
    let n = args.len();
    let items = tx.rows(&format!("{select_sql} LIMIT ?{} OFFSET ?{}", n + 1, n + 2), &window, row)?;
    Ok(courrier_core::kernel::Paged { items, total: u64::try_from(total).unwrap_or(0), page })
}

/// `n` placeholders from `?first` on, comma-separated: the inside of an `IN (...)` both databases
/// read alike (PostgreSQL's arrays are its own). None is `NULL`, which nothing equals: SQLite
/// reads an empty `IN ()` as matching nothing, PostgreSQL refuses it.
pub fn placeholders(first: usize, n: usize) -> String {
    if n == 0 {
        return "NULL".to_owned();
    }
    (first..first + n).map(|i| format!("?{i}")).collect::<Vec<_>>().join(", ")
}

/// `sql` with SQLite's numbered placeholders (`?1`) in PostgreSQL's form (`$1`). A `?` that is
/// not followed by a digit, or that stands inside a quoted string, is left alone.
pub fn numbered_dollars(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quoted = false;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                quoted = !quoted;
                out.push(c);
            }
            '?' if !quoted && chars.peek().is_some_and(char::is_ascii_digit) => out.push('$'),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_dollars_outside_quotes_only() {
        assert_eq!(
            numbered_dollars("SELECT a FROM t WHERE b = ?1 AND c = ?12"),
            "SELECT a FROM t WHERE b = $1 AND c = $12"
        );
        assert_eq!(numbered_dollars("SELECT '?1', ? FROM t WHERE x = ?2"), "SELECT '?1', ? FROM t WHERE x = $2");
        assert_eq!(numbered_dollars("SELECT 'it''s ?1' WHERE y = ?3"), "SELECT 'it''s ?1' WHERE y = $3");
    }

    #[test]
    fn an_in_list_numbers_its_placeholders_from_the_first() {
        assert_eq!(placeholders(2, 3), "?2, ?3, ?4");
        assert_eq!(placeholders(1, 0), "NULL", "an empty list: nothing is in it, and PostgreSQL parses it");
    }

    #[test]
    fn options_bind_null() {
        assert_eq!(Arg::from(None::<i64>), Arg::Null);
        assert_eq!(Arg::from(Some("x")), Arg::Text("x"));
        assert_eq!(Arg::from(7_u32), Arg::I64(7));
    }
}
