//! `ruok`: whether each component the OCR service depends on answers.

use super::Service;

/// The components of `GET /api/ruok/{id}`, by the contract's ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    Database,
    OcrEngine,
    DocumentStore,
}

impl Component {
    pub const ALL: [Component; 3] = [Component::Database, Component::OcrEngine, Component::DocumentStore];

    pub fn from_id(id: i64) -> Option<Self> {
        match id {
            1 => Some(Component::Database),
            2 => Some(Component::OcrEngine),
            3 => Some(Component::DocumentStore),
            _ => None,
        }
    }

    pub fn id(self) -> i64 {
        match self {
            Component::Database => 1,
            Component::OcrEngine => 2,
            Component::DocumentStore => 3,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Component::Database => "database",
            Component::OcrEngine => "ocr engine",
            Component::DocumentStore => "document store",
        }
    }
}

/// `Err` carries the reason, for the operator; the caller only learns that it failed.
pub fn check(app: &Service, component: Component) -> Result<(), String> {
    match component {
        Component::Database => app.store.read().map(drop).map_err(|e| e.to_string()),
        Component::OcrEngine => app.engine.ready().map_err(|e| e.to_string()),
        Component::DocumentStore => app.blobs.ready().map_err(|e| e.to_string()),
    }
}
