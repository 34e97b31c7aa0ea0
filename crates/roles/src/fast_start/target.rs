//! Whether a standby takes the failover an observer asks of it.
//!
//! A standby takes a failover only
//!
//! - if fast-start failover is enabled here (not disabled, not observe-only for maintenance)
//!   and it is one of the targets;
//! - if it is an open standby of the incarnation the request fails over from, following the
//!   primary the request names (an observer's stale view of who the primary is asks no one);
//! - from the observer its primary named in a heartbeat *of its current session* (a standby
//!   forgets the name at every new hello: a primary restarted, or one that took over by a
//!   switchover, names its own);
//! - under Maximum Availability, only if that primary called it synchronized at its last
//!   heartbeat of that session;
//! - and only once it has itself not heard from its primary for `threshold` — or, under
//!   Maximum Availability only, once the primary's redo port refuses connections (the process
//!   is gone).
//!
//! Every refusal is final for that request: the standby evaluates it holding its role-change
//! lock, so nothing of it goes on after the answer.

use std::time::Duration;

use super::{Protection, Settings};

/// The request, as the observer's ping carries it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FailoverRequest {
    pub observer: String,
    /// The primary and incarnation the observer fails over from.
    pub from: String,
    pub incarnation: u32,
}

/// What the standby knows of itself and its primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetView {
    pub member: String,
    /// Fast-start failover is enabled in this member's settings (and not observe-only).
    pub enabled: bool,
    /// An open standby, not fenced.
    pub open_standby: bool,
    pub incarnation: u32,
    /// The primary it follows (named in the hello of its current or last session).
    pub primary: Option<String>,
    /// The observer that primary named in a heartbeat of that session.
    pub observer: Option<String>,
    /// Whether that primary called it synchronized at its last heartbeat of that session.
    pub synchronized: bool,
    /// How long since it last heard from its primary.
    pub silence: Duration,
    /// Whether the primary's redo port refuses connections now.
    pub primary_port_refuses: bool,
}

/// Whether `view` takes `request`: `Ok` to fail over, `Err` with the reason.
pub fn accept_failover(
    settings: &Settings,
    view: &TargetView,
    request: &FailoverRequest,
) -> Result<(), String> {
    if !view.enabled {
        return Err(format!(
            "fast-start failover is disabled or observe-only on '{}'",
            view.member
        ));
    }
    if !settings.targets.contains(&view.member) {
        return Err(format!("'{}' is not a fast-start failover target", view.member));
    }
    if !view.open_standby {
        return Err(format!("'{}' is not an open standby that can take over", view.member));
    }
    if view.incarnation != request.incarnation || view.primary.as_deref() != Some(&request.from) {
        return Err(format!(
            "the observer fails over from '{}' in incarnation {}, but '{}' follows {} in incarnation {}",
            request.from,
            request.incarnation,
            view.member,
            view.primary.as_deref().map_or("no primary".to_string(), |name| format!("'{name}'")),
            view.incarnation
        ));
    }
    if view.observer.as_deref() != Some(request.observer.as_str()) {
        return Err(format!(
            "its primary named {} as its observer, not '{}'",
            view.observer.as_deref().map_or("none".to_string(), |name| format!("'{name}'")),
            request.observer
        ));
    }
    let maximum_availability = settings.protection == Protection::MaximumAvailability;
    // A closed redo port is reason enough not to wait out the threshold only under Maximum
    // Availability, where the primary acknowledges nothing this standby lacks without the
    // observer's grant. Under Maximum Performance the primary's lease must have run out.
    let gone = maximum_availability && view.primary_port_refuses;
    if view.silence < settings.threshold && !gone {
        return Err(format!(
            "this standby heard from its primary {:.1} s ago (threshold {:?}) and its redo port answers",
            view.silence.as_secs_f64(),
            settings.threshold
        ));
    }
    if maximum_availability && !view.synchronized {
        return Err(
            "the primary did not call this standby synchronized at its last heartbeat".into()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            threshold: Duration::from_secs(2),
            lag_limit: Duration::from_secs(30),
            protection: Protection::MaximumAvailability,
            targets: vec!["west".into()],
            observers: vec!["o1".into()],
            relays: Default::default(),
        }
    }

    fn view() -> TargetView {
        TargetView {
            member: "west".into(),
            enabled: true,
            open_standby: true,
            incarnation: 1,
            primary: Some("east".into()),
            observer: Some("o1".into()),
            synchronized: true,
            silence: Duration::from_secs(3),
            primary_port_refuses: false,
        }
    }

    fn request() -> FailoverRequest {
        FailoverRequest { observer: "o1".into(), from: "east".into(), incarnation: 1 }
    }

    #[test]
    fn a_target_takes_a_failover_only_when_every_condition_holds() {
        assert_eq!(accept_failover(&settings(), &view(), &request()), Ok(()));
        type Spoil = fn(&mut TargetView, &mut FailoverRequest);
        let spoils: [(&str, Spoil); 8] = [
            ("disabled", |view, _| view.enabled = false),
            ("not a target", |view, _| view.member = "south".into()),
            ("fenced", |view, _| view.open_standby = false),
            ("another incarnation", |_, request| request.incarnation = 2),
            ("another primary", |_, request| request.from = "south".into()),
            ("another observer", |_, request| request.observer = "o2".into()),
            ("heard recently", |view, _| view.silence = Duration::from_millis(500)),
            ("not synchronized", |view, _| view.synchronized = false),
        ];
        for (what, spoil) in spoils {
            let (mut view, mut request) = (view(), request());
            spoil(&mut view, &mut request);
            assert!(accept_failover(&settings(), &view, &request).is_err(), "{what}: accepted");
        }
    }

    #[test]
    fn a_closed_redo_port_shortens_the_wait_under_maximum_availability_only() {
        let mut view = view();
        view.silence = Duration::from_millis(100);
        view.primary_port_refuses = true;
        assert_eq!(accept_failover(&settings(), &view, &request()), Ok(()));
        let performance = Settings { protection: Protection::MaximumPerformance, ..settings() };
        assert!(accept_failover(&performance, &view, &request()).is_err());
    }
}
