//! An observer's ping of a member and its answer, as one step of the model: lost, refused,
//! or answered (a member's pong, the observer's decision on it, a failover request taken).

use roles::fast_start::{FailoverRequest, Outcome, TargetView, accept_failover};

use super::*;

impl System {
    /// A ping from observer `o` to member `m`, and its answer.
    pub(super) fn ping(&self, state: &mut State, o: usize, m: usize) -> Option<()> {
        let node = self.observer_node(o);
        let observers = self.config.observers;
        let members = self.config.members;
        let now = state.observers[o].now;
        if !self.link(state, node, m) || !state.members[m].up {
            // Lost, or nothing listens (a refused connection: the process is gone).
            let refused = self.link(state, node, m) && !state.members[m].up;
            let observer = &mut state.observers[o];
            let mut disk = observer.disk.clone();
            observer.core.note(
                MEMBERS[m],
                Outcome::Unreachable { refused, error: "unreachable".into() },
                now,
                &mut |record| {
                    disk = record.clone();
                    Ok(())
                },
            );
            observer.disk = disk;
            state.members[m].last_answer[o] = None;
            return Some(());
        }
        let observer = &mut state.observers[o];
        let mut disk = observer.disk.clone();
        let ping = observer.core.ping_for(MEMBERS[m], now, &mut |record| {
            disk = record.clone();
            Ok(())
        });
        observer.disk = disk;
        // The member acts on it.
        let member_now = state.members[m].now;
        if ping.newer_incarnation > state.members[m].incarnation
            && state.members[m].primary_role
            && !state.members[m].fenced
        {
            Self::fence(&mut state.members[m]);
        }
        let mut refusal: Option<(String, bool)> = None;
        if ping.failover {
            let member = &state.members[m];
            let primary = member.following;
            let view = TargetView {
                member: MEMBERS[m].into(),
                enabled: true,
                open_standby: member.up && !member.primary_role && !member.fenced,
                incarnation: member.incarnation,
                primary: primary.map(|index| MEMBERS[index].to_string()),
                observer: member.heard_observer.clone(),
                synchronized: member.heard_synchronized,
                silence: member_now.since(member.last_heard),
                primary_port_refuses: primary
                    .is_some_and(|index| !state.members[index].up && self.link(state, m, index)),
            };
            let request = FailoverRequest {
                observer: OBSERVERS[o].into(),
                from: ping.failover_from.clone(),
                incarnation: ping.failover_incarnation,
            };
            match accept_failover(&self.config.settings(), &view, &request) {
                Ok(()) => {
                    let incarnation = state.members[m].incarnation + 1;
                    self.promote(state, m, incarnation, PrimaryRecord::default());
                }
                Err(_) => refusal = Some(("refused".into(), true)),
            }
        }
        let member = &mut state.members[m];
        if let Some(core) = &mut member.core {
            let mut record = member.record.clone();
            let _ = core.note_ping(&ping, member.last_answer[o], member_now, &mut |new| {
                record = new.clone();
                Ok(())
            });
            member.record = record;
        }
        self.refresh(member);
        let mut pong = self.member_pong(member, m);
        if let Some((reason, last)) = refusal {
            pong.refusal = reason;
            pong.refusal_final = last;
        }
        if !self.link(state, m, node) {
            state.members[m].last_answer[o] = None;
            let observer = &mut state.observers[o];
            let mut disk = observer.disk.clone();
            observer.core.note(
                MEMBERS[m],
                Outcome::Unreachable { refused: false, error: "no answer".into() },
                now,
                &mut |record| {
                    disk = record.clone();
                    Ok(())
                },
            );
            observer.disk = disk;
            return Some(());
        }
        state.members[m].last_answer[o] = Some(member_now);
        let observer = &mut state.observers[o];
        let mut disk = observer.disk.clone();
        observer.core.note(
            MEMBERS[m],
            Outcome::Answered { pong: Box::new(pong), to_failover: ping.failover },
            now,
            &mut |record| {
                disk = record.clone();
                Ok(())
            },
        );
        observer.disk = disk;
        let _ = (observers, members);
        Some(())
    }
}
