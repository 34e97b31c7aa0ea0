//! What the web pages of the members and of the observer share: their style sheet, and the lag
//! above which a member is shown as lagging (the broker's report says the same).

/// The pages' style sheet (served at `/web/page.css`).
pub const PAGE_CSS: &str = include_str!("assets/page.css");

/// Lags beyond this are a warning, on the pages as in `redoguard show configuration` (Data
/// Guard's default threshold).
pub const LAG_THRESHOLD_S: f64 = 30.0;
