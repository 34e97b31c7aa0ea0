use super::*;

/// The figures of the last full runs (`docs/bench/*.json`): every case shows, and each
/// limit. With `REDOGUARD_FIGURES_DIR` set, they are written there (to look at, or to
/// refresh `docs/bench/`).
#[test]
fn figures_of_the_last_full_runs() {
    let commit: BenchCommitReport =
        serde_json::from_str(include_str!("../../../../docs/bench/commit.json")).unwrap();
    let resp: BenchRespReport =
        serde_json::from_str(include_str!("../../../../docs/bench/resp.json")).unwrap();
    let transport: TransportReport =
        serde_json::from_str(include_str!("../../../../docs/bench/transport.json")).unwrap();
    let figures = [
        ("commit", super::commit(&commit), "1 / fdatasync p50", commit.cases.len()),
        ("resp", super::resp(&resp), "raw fdatasync p50", 10), // SET and GET (5), the types (5)
        ("transport", super::transport(&transport), "round trip + raw fdatasync p50", 6),
    ];
    let out = std::env::var_os("REDOGUARD_FIGURES_DIR").map(std::path::PathBuf::from);
    for (name, figure, limit, groups) in figures {
        assert_eq!(figure.panels[0].groups.len(), groups, "{name}");
        for panel in &figure.panels {
            assert!(
                panel.groups.iter().any(|group| group.values.iter().any(Option::is_some)),
                "{name}: an empty panel"
            );
        }
        let svg = figure.to_svg().unwrap();
        assert!(svg.contains(limit), "{name}: no limit line");
        if let Some(out) = &out {
            figure.write(&out.join(format!("{name}.svg"))).unwrap();
        }
    }
    let transport = super::transport(&transport);
    assert_eq!(
        transport.panels.len(),
        11,
        "modes, latency, three systems, lag; then two of each of quorum, sync-rate and \
         commit-mode, and the CPU per commit (the full default run has every experiment)"
    );
}

/// The figure of the recorded run of the issue 11 experiments alone: two panels for
/// each but the CPU's one, none empty, no panel of the experiments that did not run.
#[test]
fn figure_of_the_recorded_experiments() {
    let report: TransportReport =
        serde_json::from_str(include_str!("../../../../docs/bench/transport-experiments.json"))
            .unwrap();
    let figure = super::transport(&report);
    let titles: Vec<&str> = figure.panels.iter().map(|panel| panel.title.as_str()).collect();
    assert_eq!(titles.len(), 7, "{titles:?}");
    for (index, start) in [
        "Two SYNC standbys",
        "Two SYNC standbys",
        "SYNC AFFIRM at a steady",
        "SYNC AFFIRM at a steady",
        "COMMITMODE",
        "COMMITMODE",
        "The primary's CPU",
    ]
    .into_iter()
    .enumerate()
    {
        assert!(titles[index].starts_with(start), "{titles:?}");
    }
    for panel in &figure.panels {
        assert!(
            panel.groups.iter().any(|group| group.values.iter().any(Option::is_some)),
            "an empty panel: {}",
            panel.title
        );
    }
    if let Some(out) = std::env::var_os("REDOGUARD_FIGURES_DIR") {
        figure.write(&std::path::Path::new(&out).join("transport-experiments.svg")).unwrap();
    }
}
