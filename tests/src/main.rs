//! The one integration-test binary (one link instead of many). Every file under `tests/src/` is
//! a module declared here or in `lib.rs`; `tidy::every_source_file_is_a_declared_module` fails
//! otherwise.

mod access;
mod admin_browser;
mod admin_pages;
mod bounces;
mod cli;
mod cli_admin;
mod concurrency;
mod credentials;
mod dns_check;
mod einvoices;
mod envelopes;
mod extraction;
mod invoice_layouts;
mod invoices;
mod jobs;
mod mail_in;
mod members;
mod moderation;
mod ocr;
mod ocr_clients;
mod ocr_retention;
mod openapi;
mod pdf_bombs;
mod postgres;
mod sends;
mod shutdown;
mod slow_clients;
mod smtp;
mod store_copy;
mod subscriber_browser;
mod subscribers;
mod tidy;
mod webhooks;
