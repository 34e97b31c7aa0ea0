//! Redo transport: ships the primary's redo to its standbys and receives it there.
//!
//! `PrimaryTransport` plugs into the primary's redo log as its `Shipper` (see `redo::ship`):
//! one sender per destination, SYNC or ASYNC, AFFIRM or NOAFFIRM, under a protection mode.
//! `StandbyService` is the standby's receiver, writing the primary's redo into standby logs.
//! The bytes on the wire are `proto`'s; see `docs/wire-protocol.md`.
//!
//! Senders and receivers are plain threads with blocking sockets: a SYNC write is sent and its
//! acknowledgement read by the log writer's own thread, so that no thread hand-off sits between
//! a commit and the standby.

pub mod admission;
pub mod auto_compression;
pub mod cascade;
pub mod compression;
pub mod config;
pub mod conn;
pub mod copy;
pub mod delay;
pub mod fast_start;
pub mod listener;
pub mod log_limit;
pub mod primary;
pub mod primary_port;
pub mod quorum;
pub mod receiver;
pub mod settings;
pub mod standby_service;

pub use admission::{ListenerLimits, Security};
pub use cascade::{Cascade, CascadeContext};
pub use compression::{Compression, CompressionCounts, CompressionScope, DestinationCompression};
pub use config::{
    Alternate, BufferSize, DestinationConfig, DestinationState, FastStartFailoverConfig, Hop,
    MemberConfig, MemberKind, ObserverEntry, ProtectionMode, ReplicationConfig, RoleConfig,
    RouteConfig, RouteTree, StandbyConfig, Transport, route_tree, transport_name,
};
pub use copy::{CopyProgress, CopyServer, DataSnapshot, Entries, SnapshotSource, fetch_copy};
pub use fast_start::{FailoverRefusal, FastStart, ObserverHooks};
pub use listener::{RedoListener, RedoPort, Refusals, probe, relay_seal};
pub use primary::{
    DestinationStatus, LOG_BUFFER_MAX_SHIPPED, LagSummary, Phase, PrimaryIdentity,
    PrimaryTransport, TransportEvent, TransportEvents,
};
pub use primary_port::PrimaryPort;
pub use quorum::{Protection, SyncQuorum};
pub use receiver::{
    AppliedScn, ReceiverContext, RoleInfoSource, StandbyReceiver, StandbyReplicationStatus,
};
pub use settings::{DestinationEdit, RuntimeSettings};
pub use standby_service::StandbyService;
