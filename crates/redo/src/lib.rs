//! The redo engine: how a change becomes durable redo, and how that redo is read back.
