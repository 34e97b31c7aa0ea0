//! One writer for every benchmark's results: the table a person reads (standard output), the
//! report as JSON, and its figure as SVG beside the JSON (same name, `.svg`).

use std::path::{Path, PathBuf};

use super::plot::Figure;

/// Where the figure of the JSON report at `json` goes.
pub fn figure_path(json: &Path) -> PathBuf {
    json.with_extension("svg")
}

/// Prints `text`, writes `report` as JSON to `json` and `figure` as SVG beside it, and says
/// where each went. The JSON is written even if the figure cannot be.
pub fn write(
    text: &str,
    report: &impl serde::Serialize,
    json: &Path,
    figure: &Figure,
) -> anyhow::Result<()> {
    print!("{text}");
    write_json(report, json)?;
    println!("json: {}", json.display());
    let svg = figure_path(json);
    figure.write(&svg)?;
    println!("plot: {}", svg.display());
    Ok(())
}

/// Writes `report` as pretty JSON (with a final newline) to `json`.
pub fn write_json(report: &impl serde::Serialize, json: &Path) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(report)?;
    std::fs::write(json, text + "\n")
        .map_err(|error| anyhow::anyhow!("cannot write {}: {error}", json.display()))
}
