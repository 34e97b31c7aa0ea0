//! The model's first state: every member and observer as a cold start leaves them, or armed
//! by the protocol's own steps from there.

use super::*;

impl System {
    /// The initial state: armed (the protocol's own steps from the cold start), or cold.
    pub(super) fn initial(&self) -> Vec<State> {
        let cold = self.cold_start();
        if !self.config.armed {
            return vec![cold];
        }
        // The steps that arm it, each the model's own.
        let mut state = cold;
        let members = self.config.members;
        let mut steps = Vec::new();
        for d in 1..members {
            steps.push(Action::Hello(0, d));
            if self.is_target(d) {
                steps.push(Action::Synchronize(0, d));
            }
        }
        for o in 0..self.config.observers {
            steps.extend([Action::Ping(o, 0), Action::Ping(o, 0), Action::Step(o)]);
        }
        for d in 1..members {
            steps.push(Action::Heartbeat(0, d));
        }
        for o in 0..self.config.observers {
            for m in 0..members {
                steps.push(Action::Ping(o, m));
            }
            steps.push(Action::Step(o));
        }
        for step in steps {
            if let Some(next) = self.next_state(&state, step) {
                state = next;
            }
        }
        vec![state]
    }
}

impl System {
    fn cold_start(&self) -> State {
        let members = self.config.members;
        let observers = self.config.observers;
        let member = |index: usize| Member {
            primary_role: index == 0,
            incarnation: 1,
            fenced: false,
            log: Vec::new(),
            record: PrimaryRecord::default(),
            reign: u8::from(index == 0),
            up: true,
            core: (index == 0).then(|| self.new_core(MEMBERS[0], PrimaryRecord::default(), 0)),
            destinations: vec![Destination::default(); members],
            answered: 0,
            following: None,
            heard_observer: None,
            heard_synchronized: false,
            last_heard: start(),
            now: start(),
            last_answer: vec![None; observers],
        };
        State {
            members: (0..members).map(member).collect(),
            observers: (0..observers)
                .map(|index| ObserverActor {
                    up: true,
                    disk: ObserverRecord::default(),
                    core: Observer::new(
                        self.config.observer_settings(index),
                        ObserverRecord::default(),
                    ),
                    now: start(),
                })
                .collect(),
            cut: BTreeSet::new(),
            faults_left: self.config.faults,
            next_write: 0,
            reigns: 1,
            acks: Vec::new(),
        }
    }
}
