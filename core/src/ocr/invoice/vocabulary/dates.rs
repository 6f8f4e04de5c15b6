//! Date labels beyond [`crate::ocr::invoice::labels::LABELS`]: Dutch, Spanish, Polish, and more
//! German, Italian and English forms. The dates of delivery or service ("Leistungsdatum", "Data
//! sprzedaży", "tax point") are not the invoice's date and are left out on purpose.

use crate::ocr::invoice::labels::Key;

pub const LABELS: &[(&str, Key, f32)] = &[
    ("belegdatum", Key::Date, 1.0),
    ("factuur datum", Key::Date, 1.0),
    ("fecha", Key::Date, 0.6),
    ("fecha de factura", Key::Date, 1.0),
    ("fecha factura", Key::Date, 1.0),
    ("fecha de emision", Key::Date, 1.0),
    ("fecha emision", Key::Date, 1.0),
    ("data wystawienia", Key::Date, 1.0),
    ("data faktury", Key::Date, 1.0),
    ("data di emissione", Key::Date, 1.0),
    ("date d'emission", Key::Date, 1.0),
    // Due dates.
    ("te betalen voor", Key::DueDate, 1.0),
    ("uiterste betaaldatum", Key::DueDate, 1.0),
    ("betalen voor", Key::DueDate, 0.9),
    ("vencimiento", Key::DueDate, 1.0),
    ("fecha de vencimiento", Key::DueDate, 1.0),
    ("fecha vencimiento", Key::DueDate, 1.0),
    ("termin platnosci", Key::DueDate, 1.0),
    ("termin zaplaty", Key::DueDate, 1.0),
    ("zaplata do", Key::DueDate, 1.0),
    ("platne do", Key::DueDate, 1.0),
    ("falligkeitsdatum", Key::DueDate, 1.0),
    ("zahlbar bis zum", Key::DueDate, 1.0),
    ("a payer avant le", Key::DueDate, 1.0),
    ("payment due", Key::DueDate, 1.0),
    ("payment due date", Key::DueDate, 1.0),
];
