//! The SQLite side of the one statement set (`courrier_store_sql::sql`): a shared statement runs
//! here as written, its arguments bound as SQLite values and its columns read by type.

use super::{SqliteTx, map_err};
use courrier_core::storage::StoreError;
use courrier_store_sql::sql::{Arg, Dialect, SqlRow, SqlTx};
use rusqlite::types::{ToSqlOutput, ValueRef};

struct Bound<'a>(&'a Arg<'a>);

impl rusqlite::ToSql for Bound<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match *self.0 {
            Arg::Null => ValueRef::Null,
            Arg::I64(v) => ValueRef::Integer(v),
            Arg::Text(s) => ValueRef::Text(s.as_bytes()),
            Arg::Bytes(b) => ValueRef::Blob(b),
            Arg::Bool(b) => ValueRef::Integer(i64::from(b)),
        }))
    }
}

fn bound<'a>(args: &'a [Arg<'a>]) -> impl rusqlite::Params + 'a {
    rusqlite::params_from_iter(args.iter().map(Bound))
}

struct Row<'r, 's>(&'r rusqlite::Row<'s>);

impl SqlRow for Row<'_, '_> {
    fn i64(&self, i: usize) -> Result<i64, StoreError> {
        self.0.get(i).map_err(map_err)
    }
    fn opt_i64(&self, i: usize) -> Result<Option<i64>, StoreError> {
        self.0.get(i).map_err(map_err)
    }
    fn text(&self, i: usize) -> Result<String, StoreError> {
        self.0.get(i).map_err(map_err)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, StoreError> {
        self.0.get(i).map_err(map_err)
    }
    fn bytes(&self, i: usize) -> Result<Vec<u8>, StoreError> {
        self.0.get(i).map_err(map_err)
    }
    fn bool(&self, i: usize) -> Result<bool, StoreError> {
        self.0.get(i).map_err(map_err)
    }
}

impl SqlTx for SqliteTx {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn run(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<u64, StoreError> {
        let changed = self.conn().prepare_cached(sql).and_then(|mut st| st.execute(bound(args))).map_err(map_err)?;
        Ok(changed as u64)
    }

    fn rows<T>(
        &mut self,
        sql: &str,
        args: &[Arg<'_>],
        mut row: impl FnMut(&dyn SqlRow) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        let mut st = self.conn().prepare_cached(sql).map_err(map_err)?;
        let mut rows = st.query(bound(args)).map_err(map_err)?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(map_err)? {
            out.push(row(&Row(r))?);
        }
        Ok(out)
    }

    fn first<T>(
        &mut self,
        sql: &str,
        args: &[Arg<'_>],
        row: impl FnOnce(&dyn SqlRow) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        let mut st = self.conn().prepare_cached(sql).map_err(map_err)?;
        let mut rows = st.query(bound(args)).map_err(map_err)?;
        match rows.next().map_err(map_err)? {
            Some(r) => row(&Row(r)).map(Some),
            None => Ok(None),
        }
    }
}
