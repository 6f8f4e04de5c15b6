-- Retention (decisions.md): documents are deleted COURRIER_OCR_RETENTION_DAYS after their upload
-- and with their user; a stored file is removed once no document names it (the store is
-- content-addressed, so two documents may share one). An index for each of those three questions.
CREATE INDEX ocr_documents_created ON ocr_documents (created_at);
CREATE INDEX ocr_documents_user ON ocr_documents (user_id);
CREATE INDEX ocr_documents_blob ON ocr_documents (blob);
