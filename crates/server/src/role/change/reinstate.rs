//! Fence (a primary that learns of a newer incarnation) and reinstate (a fenced member
//! becomes a standby of the new primary, its divergent redo set aside).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use redo::{Fence, Incarnation, LogSeq, RedoLog, Role, Scn};
use roles::Branch;
use transport::{PrimaryPort, RedoPort};

use super::super::Roles;
use super::super::api::{Reinstated, SetAside};
use super::super::gate::GateState;
use super::*;

impl Roles {
    /// This primary has been failed over: it takes no write again until it is reinstated,
    /// and ships no more redo.
    pub async fn fence(
        self: &Arc<Roles>,
        incarnation: u32,
        primary: &str,
        reason: &str,
    ) -> anyhow::Result<()> {
        let _transition = self.transition.lock().await;
        let running = self.running()?;
        let control = running.db.redo().control();
        if control.role != Role::Primary {
            // (The news reached it after it became a standby: a reinstate, a switchover.)
            return refuse(format!(
                "'{}' is a standby now: there is no primary to fence",
                self.member_name()
            ));
        }
        if Incarnation(incarnation) <= control.incarnation {
            return refuse(format!(
                "incarnation {incarnation} is not newer than this database's {}",
                control.incarnation
            ));
        }
        if control.fenced.as_ref().is_some_and(|fence| fence.incarnation.0 >= incarnation) {
            return Ok(());
        }
        self.gate.set(GateState::Fenced {
            incarnation,
            primary: primary.to_string(),
            primary_resp: self
                .config
                .replication
                .member_named(primary)
                .map(|member| member.resp.clone()),
        });
        // Its data files stay where they are: a reinstate may rewind it to the failover point.
        running.db.suspend_checkpoints();
        let db = running.db.clone();
        let fence = Fence { incarnation: Incarnation(incarnation), by: primary.to_string() };
        blocking(move || Ok(db.redo().fence(fence)?)).await?;
        tracing::error!(
            primary,
            incarnation,
            reason,
            "FENCED: another member is the primary in a newer incarnation; this database takes no write until it is reinstated"
        );
        if let Some(transport) = &running.transport {
            running.db.redo().set_shipper(None);
            let running = running.clone();
            blocking(move || {
                if let Some(transport) = &running.transport {
                    transport.stop();
                }
                Ok(())
            })
            .await?;
            let _ = transport;
        }
        if let Some(listener) = &self.listener {
            let events = self.events.clone();
            listener.set_port(Arc::new(PrimaryPort {
                member: self.member_name(),
                incarnation: control.incarnation,
                role_info: self.role_info_source(&running.db),
                events: Arc::new(move |event| {
                    let _ = events.send(event);
                }),
                refusals: self.refusals.clone(),
                copy: None,
            }) as Arc<dyn RedoPort>);
        }
        self.note_change(format!(
            "fenced: '{primary}' is the primary of incarnation {incarnation} ({reason})"
        ));
        Ok(())
    }

    /// Reinstate: this fenced member becomes a standby of `primary`.
    pub async fn reinstate(self: &Arc<Roles>, primary: &str) -> anyhow::Result<Reinstated> {
        self.require_members()?;
        self.learn_whether_failed_over(primary).await?;
        let _transition = self.transition.lock().await;
        let started = Instant::now();
        let running = self.running()?;
        let control = running.db.redo().control();
        let Some(fence) = control.fenced.clone() else {
            return match (control.role, self.gate.state()) {
                // Unconfirmed only now (the request came while the database was opening).
                (Role::Primary, GateState::Unconfirmed { members }) => {
                    self.unconfirmed_refusal(&members, primary)
                }
                (Role::Primary, _) => refuse(format!(
                    "'{}' is a primary that has not been failed over: there is nothing to reinstate (to make it a standby, switch over)",
                    self.member_name()
                )),
                (Role::Standby, _) => refuse(format!(
                    "'{}' is a standby on its primary's branch: there is nothing to reinstate",
                    self.member_name()
                )),
            };
        };
        let Some(member) = self.config.replication.member_named(primary).cloned() else {
            return refuse(format!("'{primary}' is not a member of this configuration"));
        };
        let info = self.probe_primary(primary).await?;
        if info.role != proto::WireRole::Primary || info.fenced_incarnation != 0 {
            return refuse(format!(
                "'{primary}' is not an open primary (it says it is a {:?}{})",
                info.role,
                if info.fenced_incarnation != 0 { ", fenced" } else { "" }
            ));
        }
        if info.database_id != control.database_id.0 {
            return refuse(format!("'{primary}' is the primary of another database"));
        }
        if Incarnation(info.incarnation) < fence.incarnation
            || Incarnation(info.incarnation) <= control.incarnation
        {
            return refuse(format!(
                "'{primary}' is in incarnation {}, not in one newer than this database's {}",
                info.incarnation, control.incarnation
            ));
        }
        let branch = info
            .history
            .iter()
            .map(Branch::from_wire)
            .find(|branch| branch.incarnation.0 == control.incarnation.0 + 1);
        let aside = self.aside_dir(&fence)?;
        let db = running.db.clone();
        let checkpoint = running.db.checkpoint_scn();
        let (first_scn, keep_before) = match &branch {
            Some(branch) => (
                branch.first_scn,
                if branch.prev_closed_here {
                    branch.first_seq.prev_seq()
                } else {
                    branch.first_seq
                },
            ),
            None => (Scn(0), LogSeq(1)),
        };
        // The records past the failover point, for the DBA, before anything is changed (all of
        // them: a delayed apply's horizon does not hide any).
        running.db.redo().set_apply_horizon(Scn(u64::MAX));
        let tail_dir = aside.clone();
        let diverged =
            blocking(move || super::super::divergent::write(&db, first_scn, &tail_dir)).await?;
        if let Some(unreadable) = &diverged.unreadable {
            tracing::error!(unreadable, dir = %aside.display(), "reinstate: not all of the divergent tail could be read");
        }
        let rewind = branch.is_some() && checkpoint < first_scn;
        drop(running);
        let primary_name = primary.to_string();
        let redo_address = member.redo.clone();
        let aside_for_change = aside.clone();
        let copy_from = primary_name.clone();
        let logs = self
            .reopen(&format!("reinstate as a standby of '{primary}'"), move |roles| {
                let (redo_config, db_config) = roles.config.resolved();
                if rewind {
                    let set = redo::rewind::set_aside_logs(
                        &redo_config,
                        roles.storage.as_ref(),
                        keep_before,
                        &aside_for_change,
                    )?;
                    RedoLog::rewrite_control(&redo_config, roles.storage.as_ref(), |control| {
                        control.role = Role::Standby;
                        control.fenced = None;
                        control.followed = false;
                        Ok(())
                    })?;
                    Ok(set.logs)
                } else {
                    // Its data files already hold changes past the branch: they cannot be
                    // rewound. Everything is set aside and the database is rebuilt from a copy
                    // of the new primary's.
                    let set = redo::rewind::set_aside_logs(
                        &redo_config,
                        roles.storage.as_ref(),
                        LogSeq(1),
                        &aside_for_change,
                    )?;
                    super::super::copy::set_aside_database(
                        roles.storage.as_ref(),
                        &redo_config,
                        &db_config,
                        &aside_for_change,
                    )?;
                    super::super::copy::copy_from_primary(
                        &roles.config,
                        &roles.storage,
                        &redo_address,
                        &copy_from,
                        &roles.member_name(),
                    )?;
                    Ok(set.logs)
                }
            })
            .await?;
        let incarnation = info.incarnation;
        self.note_change(format!(
            "reinstated as a standby of '{primary_name}' (incarnation {incarnation}){}",
            if rewind { String::new() } else { ", rebuilt from a copy".to_string() }
        ));
        Ok(Reinstated {
            member: self.member_name(),
            primary: primary_name,
            incarnation,
            set_aside: SetAside {
                dir: aside.display().to_string(),
                logs,
                first_scn: diverged.range.map(|(first, _, _)| first),
                last_scn: diverged.range.map(|(_, last, _)| last),
                records: diverged.range.map_or(0, |(_, _, count)| count),
                unreadable: diverged.unreadable,
            },
            rebuilt: !rewind,
            elapsed_ms: started.elapsed().as_millis() as u64,
        })
    }

    /// A new directory for what a reinstate sets aside.
    fn aside_dir(&self, fence: &Fence) -> anyhow::Result<PathBuf> {
        let stamp = redo::types::now_unix_us() / 1_000_000;
        let dir = self
            .config
            .server
            .data_dir
            .join("diverged")
            .join(format!("{stamp}-before-incarnation-{}", fence.incarnation));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(dir)
    }
}

impl Roles {
    /// A primary restarted after a failover learns of it from the first member that answers
    /// it, its gate `Unconfirmed` until then (some milliseconds when one can be reached). A
    /// reinstate sent meanwhile asks every destination to connect at once (not at its next
    /// `reopen`), waits for that answer, briefly, and, still unconfirmed, asks `primary`
    /// itself: an open primary of this database in a newer incarnation is proof that this
    /// one was failed over, and it is fenced on that word (fencing only takes writes away).
    /// Otherwise the refusal says whom it is still waiting for. (All before the transition
    /// lock, which the fencing takes.)
    async fn learn_whether_failed_over(self: &Arc<Roles>, primary: &str) -> anyhow::Result<()> {
        let GateState::Unconfirmed { members } = self.gate.state() else { return Ok(()) };
        if let Some(running) = self.current()
            && let Some(transport) = &running.transport
        {
            for destination in self.config.replication.destinations() {
                transport.connect_now(&destination.name);
            }
        }
        let unconfirmed = |state: &GateState| matches!(state, GateState::Unconfirmed { .. });
        let state = self.gate.wait_while(unconfirmed, super::super::gate::WRITE_WAIT).await;
        if !unconfirmed(&state) {
            return Ok(());
        }
        let control = self.running()?.db.redo().control();
        let newer = match self.probe_primary(primary).await {
            Ok(info)
                if info.role == proto::WireRole::Primary
                    && info.fenced_incarnation == 0
                    && info.database_id == control.database_id.0
                    && Incarnation(info.incarnation) > control.incarnation =>
            {
                Some(info.incarnation)
            }
            _ => None,
        };
        let Some(incarnation) = newer else {
            return self.unconfirmed_refusal(&members, primary);
        };
        match self
            .fence(
                incarnation,
                primary,
                "the primary named by a reinstate says it is the primary of a newer incarnation",
            )
            .await
        {
            Ok(()) => Ok(()),
            // Fenced or answered meanwhile: the reinstate goes on from what is there now.
            Err(error) if error.is::<Refused>() => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// What `primary` says of itself (a probe over its redo port; 5 s for each of its steps:
    /// connect, the TLS handshake, the request, the answer). One that answers under another
    /// member's name is refused.
    async fn probe_primary(&self, primary: &str) -> anyhow::Result<proto::RoleInfo> {
        let Some(member) = self.config.replication.member_named(primary).cloned() else {
            return refuse(format!("'{primary}' is not a member of this configuration"));
        };
        let address = member.redo.clone();
        let asking = self.member_name();
        let (name, tls) = (member.name.clone(), self.redo_tls.clone());
        let info = blocking(move || {
            transport::probe(&address, &name, &asking, tls.as_deref(), Duration::from_secs(5))
                .map_err(|reason| anyhow!(reason))
        })
        .await
        .map_err(|error| Refused(format!("'{primary}' cannot be reached: {error:#}")))?;
        if info.member != primary {
            return refuse(format!(
                "'{primary}''s redo address answers as '{}': check the configuration",
                info.member
            ));
        }
        Ok(info)
    }

    /// The refusal of a reinstate while this primary does not know whether it was failed over.
    fn unconfirmed_refusal<T>(&self, members: &[String], primary: &str) -> anyhow::Result<T> {
        refuse(format!(
            "'{}' has not yet heard from any member whether it was failed over while it was down (it takes no write until one answers; waiting for {}), and '{primary}' is not an open primary of a newer incarnation: try again once one can reach it (a standby gone for good is removed from the configuration)",
            self.member_name(),
            members.join(", ")
        ))
    }
}
