-- Invoice extraction (issue 7): the `meta` object of a document read with profile=invoice, kept
-- so that GET /api/ocrs returns it as POST did. JSON text; '' when nothing was extracted.
-- (Versions 6 and 7 are written on parallel branches.) XML uploads are stored with kind 'text'
-- until the kind CHECK of 0005 is widened: SQLite can only do that by rebuilding the table, which
-- is left for after the parallel branches, whose tables may reference this one, are merged.
ALTER TABLE ocr_documents ADD COLUMN meta TEXT NOT NULL DEFAULT '';
