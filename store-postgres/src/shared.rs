//! The PostgreSQL side of the one statement set (`courrier_store_sql::sql`): a shared statement's
//! `?N` placeholders become `$N` when it is first prepared on a connection (then it is taken from
//! the connection's cache by its shared text), arguments are encoded as the column's declared type
//! asks, and columns are read whatever their integer width.

use super::{PgTx, map_err};
use bytes::BytesMut;
use courrier_core::storage::StoreError;
use courrier_store_sql::sql::{Arg, Dialect, SqlRow, SqlTx, numbered_dollars};
use postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use std::error::Error;

#[derive(Debug)]
struct Bound<'a>(Arg<'a>);

type Encoded = Result<IsNull, Box<dyn Error + Sync + Send>>;

/// An integer as the column's type: SQLite has one integer type, PostgreSQL three and `BOOLEAN`.
fn integer(v: i64, ty: &Type, out: &mut BytesMut) -> Encoded {
    match *ty {
        Type::INT2 => i16::try_from(v)?.to_sql(ty, out),
        Type::INT4 => i32::try_from(v)?.to_sql(ty, out),
        Type::BOOL => (v != 0).to_sql(ty, out),
        _ => v.to_sql(ty, out),
    }
}

impl ToSql for Bound<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Encoded {
        let refuse = |what: &str| Err(format!("a {what} argument for a {ty} column").into());
        match self.0 {
            Arg::Null => Ok(IsNull::Yes),
            Arg::I64(v) if matches!(*ty, Type::INT2 | Type::INT4 | Type::INT8 | Type::BOOL) => integer(v, ty, out),
            Arg::Bool(b) if matches!(*ty, Type::INT2 | Type::INT4 | Type::INT8 | Type::BOOL) => {
                integer(i64::from(b), ty, out)
            }
            Arg::Text(s) if <&str as ToSql>::accepts(ty) => s.to_sql(ty, out),
            Arg::Bytes(b) if <&[u8] as ToSql>::accepts(ty) => b.to_sql(ty, out),
            Arg::I64(_) => refuse("integer"),
            Arg::Bool(_) => refuse("boolean"),
            Arg::Text(_) => refuse("text"),
            Arg::Bytes(_) => refuse("bytes"),
        }
    }

    /// Every type: [`Bound::to_sql`] refuses a value the column cannot take, with its reason.
    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

struct Row<'r>(&'r postgres::Row);

impl Row<'_> {
    fn opt_integer(&self, i: usize) -> Result<Option<i64>, StoreError> {
        let ty = self.0.columns().get(i).map(|c| c.type_().clone());
        match ty {
            Some(Type::INT2) => Ok(self.0.try_get::<_, Option<i16>>(i).map_err(map_err)?.map(i64::from)),
            Some(Type::INT4) => Ok(self.0.try_get::<_, Option<i32>>(i).map_err(map_err)?.map(i64::from)),
            Some(Type::BOOL) => Ok(self.0.try_get::<_, Option<bool>>(i).map_err(map_err)?.map(i64::from)),
            _ => self.0.try_get(i).map_err(map_err),
        }
    }
}

fn present<T>(v: Option<T>, i: usize) -> Result<T, StoreError> {
    v.ok_or_else(|| StoreError::Backend(format!("column {i} is NULL where a value must be")))
}

impl SqlRow for Row<'_> {
    fn i64(&self, i: usize) -> Result<i64, StoreError> {
        present(self.opt_integer(i)?, i)
    }
    fn opt_i64(&self, i: usize) -> Result<Option<i64>, StoreError> {
        self.opt_integer(i)
    }
    fn text(&self, i: usize) -> Result<String, StoreError> {
        self.0.try_get(i).map_err(map_err)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, StoreError> {
        self.0.try_get(i).map_err(map_err)
    }
    fn bytes(&self, i: usize) -> Result<Vec<u8>, StoreError> {
        self.0.try_get(i).map_err(map_err)
    }
    fn bool(&self, i: usize) -> Result<bool, StoreError> {
        Ok(present(self.opt_integer(i)?, i)? != 0)
    }
}

impl PgTx {
    /// A shared statement prepared on this connection: rewritten and prepared the first time, from
    /// the cache (keyed by its shared text) after.
    fn shared(&mut self, sql: &str) -> Result<postgres::Statement, postgres::Error> {
        self.prepared(sql, numbered_dollars)
    }

    fn shared_rows(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<postgres::Row>, StoreError> {
        let bound: Vec<Bound<'_>> = args.iter().map(|a| Bound(*a)).collect();
        let refs: Vec<&(dyn ToSql + Sync)> = bound.iter().map(|b| b as &(dyn ToSql + Sync)).collect();
        let out = self.shared(sql).and_then(|st| self.client().query(&st, &refs));
        self.track(out)
    }
}

impl SqlTx for PgTx {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn run(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<u64, StoreError> {
        let bound: Vec<Bound<'_>> = args.iter().map(|a| Bound(*a)).collect();
        let refs: Vec<&(dyn ToSql + Sync)> = bound.iter().map(|b| b as &(dyn ToSql + Sync)).collect();
        let out = self.shared(sql).and_then(|st| self.client().execute(&st, &refs));
        self.track(out)
    }

    fn rows<T>(
        &mut self,
        sql: &str,
        args: &[Arg<'_>],
        mut row: impl FnMut(&dyn SqlRow) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        self.shared_rows(sql, args)?.iter().map(|r| row(&Row(r))).collect()
    }

    fn first<T>(
        &mut self,
        sql: &str,
        args: &[Arg<'_>],
        row: impl FnOnce(&dyn SqlRow) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        match self.shared_rows(sql, args)?.first() {
            Some(r) => row(&Row(r)).map(Some),
            None => Ok(None),
        }
    }
}
