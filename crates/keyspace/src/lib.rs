//! What a client may ask of the key space: every data command as a typed operation ([`Op`]),
//! and what it answers ([`OpResult`]).
//!
//! `resp` parses requests into these (arity, syntax and Redis's error texts for arguments);
//! `db` executes them with Redis's semantics; the server hands one to the other. Keeping them
//! here, as plain data, lets neither of those crates know the other.
//!
//! *Architecture Invariant*: this crate does nothing. No I/O, no clock, no state: an
//! operation that depends on the time (a relative TTL) carries the time as the client gave it,
//! and the database resolves it against its own clock.

pub mod glob;
pub mod number;

use bytes::Bytes;

/// The type of a key's value, as TYPE names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyType {
    String,
    Hash,
    List,
    Set,
    ZSet,
}

impl KeyType {
    /// The name TYPE replies and SCAN … TYPE takes.
    pub fn name(self) -> &'static str {
        match self {
            KeyType::String => "string",
            KeyType::Hash => "hash",
            KeyType::List => "list",
            KeyType::Set => "set",
            KeyType::ZSet => "zset",
        }
    }

    /// The type SCAN … TYPE names, in any case; `None` for a name Redis would not match.
    pub fn from_name(name: &[u8]) -> Option<KeyType> {
        [KeyType::String, KeyType::Hash, KeyType::List, KeyType::Set, KeyType::ZSet]
            .into_iter()
            .find(|kind| name.eq_ignore_ascii_case(kind.name().as_bytes()))
    }
}

/// When a SET applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetCondition {
    #[default]
    Always,
    /// NX: only if the key does not exist.
    IfAbsent,
    /// XX: only if the key exists.
    IfPresent,
}

/// The unit a client gave a time in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    Seconds,
    Milliseconds,
}

/// A time as a client gave it: an amount in a unit, relative to now (EX, PX, EXPIRE, PEXPIRE)
/// or a Unix time (EXAT, PXAT, EXPIREAT, PEXPIREAT). The database turns it into an absolute
/// deadline in milliseconds with its own clock, checking for overflow as Redis does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Time {
    pub amount: i64,
    pub unit: TimeUnit,
    pub absolute: bool,
}

/// What SET does to the key's time to live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetExpiry {
    /// No option: the key is set without a time to live (any old one is dropped).
    #[default]
    Clear,
    /// KEEPTTL: the time to live the key had stays.
    Keep,
    /// EX, PX, EXAT, PXAT.
    At(Time),
}

/// What GETEX does to the key's time to live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetExExpiry {
    Unchanged,
    Persist,
    At(Time),
}

/// EXPIRE's NX, XX, GT and LT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExpireCondition {
    #[default]
    Always,
    /// Only if the key has no time to live.
    IfNone,
    /// Only if it has one.
    IfSome,
    /// Only if the new one is later (no time to live counts as infinite).
    IfLater,
    /// Only if the new one is earlier.
    IfEarlier,
    /// XX LT: only if there is one and the new one is earlier.
    IfEarlierExisting,
}

/// Which end of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Left,
    Right,
}

/// A bound of a score range: ZRANGEBYSCORE's `1`, `(1`, `-inf`, `+inf`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoreBound {
    pub value: f64,
    pub exclusive: bool,
}

/// A bound of a lexicographic range: `[a`, `(a`, `-`, `+`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LexBound {
    Min,
    Max,
    Inclusive(Bytes),
    Exclusive(Bytes),
}

/// What a ZRANGE selects by.
#[derive(Debug, Clone, PartialEq)]
pub enum ZRangeBy {
    /// Positions `start..=stop`, negative from the end.
    Rank {
        start: i64,
        stop: i64,
    },
    Score {
        min: ScoreBound,
        max: ScoreBound,
    },
    Lex {
        min: LexBound,
        max: LexBound,
    },
}

/// A whole ZRANGE family request: ZRANGE with its options, and ZRANGEBYSCORE, ZREVRANGE,
/// ZRANGEBYLEX … which are spelled as one.
#[derive(Debug, Clone, PartialEq)]
pub struct ZRange {
    pub by: ZRangeBy,
    /// REV: from the highest. For BYSCORE and BYLEX the bounds are then given max first.
    pub reverse: bool,
    /// LIMIT offset count (count < 0: all).
    pub limit: Option<(i64, i64)>,
    pub with_scores: bool,
}

/// ZADD's options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ZAddOptions {
    pub condition: SetCondition,
    /// GT (`Some(true)`) or LT (`Some(false)`): update only if the new score is greater/less.
    pub greater: Option<bool>,
    /// CH: count changed members, not only added ones.
    pub changed: bool,
    /// INCR: add to the score, one member, reply the new score.
    pub increment: bool,
}

/// How ZUNIONSTORE and friends combine scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Aggregate {
    #[default]
    Sum,
    Min,
    Max,
}

/// Which set operation SUNION, SINTER, SDIFF (and the sorted-set ones) are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetOperation {
    Union,
    Inter,
    Diff,
}

/// LCS's options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LcsOptions {
    pub len: bool,
    pub idx: bool,
    pub min_match_len: i64,
    pub with_match_len: bool,
}

/// One operation of a transaction. Keys, fields, members and values are `Bytes` slices of
/// the request that carried them.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    // Strings.
    Get {
        key: Bytes,
    },
    /// SET, and SETNX, SETEX, PSETEX, GETSET spelled as it.
    Set {
        key: Bytes,
        value: Bytes,
        condition: SetCondition,
        expiry: SetExpiry,
        get: bool,
        command: &'static str,
    },
    GetEx {
        key: Bytes,
        expiry: GetExExpiry,
    },
    GetDel {
        key: Bytes,
    },
    MGet {
        keys: Vec<Bytes>,
    },
    MSet {
        pairs: Vec<(Bytes, Bytes)>,
    },
    MSetNx {
        pairs: Vec<(Bytes, Bytes)>,
    },
    /// SETNX: `1` or `0` rather than SET NX's `OK` or nil.
    SetNx {
        key: Bytes,
        value: Bytes,
    },
    Append {
        key: Bytes,
        value: Bytes,
    },
    StrLen {
        key: Bytes,
    },
    GetRange {
        key: Bytes,
        start: i64,
        end: i64,
    },
    SetRange {
        key: Bytes,
        offset: i64,
        value: Bytes,
    },
    IncrBy {
        key: Bytes,
        increment: i64,
    },
    IncrByFloat {
        key: Bytes,
        increment: f64,
    },
    Lcs {
        first: Bytes,
        second: Bytes,
        options: LcsOptions,
    },
    SetBit {
        key: Bytes,
        offset: u64,
        bit: bool,
    },
    GetBit {
        key: Bytes,
        offset: u64,
    },

    // Keys.
    Del {
        keys: Vec<Bytes>,
    },
    Exists {
        keys: Vec<Bytes>,
    },
    Type {
        key: Bytes,
    },
    Rename {
        from: Bytes,
        to: Bytes,
        if_absent: bool,
    },
    Copy {
        from: Bytes,
        to: Bytes,
        replace: bool,
    },
    RandomKey,
    /// SORT (without BY or GET patterns): a list's, set's or sorted set's elements in order,
    /// perhaps stored as a list.
    Sort {
        key: Bytes,
        limit: Option<(i64, i64)>,
        descending: bool,
        alpha: bool,
        store: Option<Bytes>,
    },
    /// MEMORY USAGE: bytes the key takes in the rows (its elements estimated from `samples`
    /// of them, 0: all).
    MemoryUsage {
        key: Bytes,
        samples: u64,
    },
    /// FLUSHDB and FLUSHALL (one database).
    FlushAll,
    Expire {
        key: Bytes,
        at: Time,
        condition: ExpireCondition,
        command: &'static str,
    },
    /// TTL and PTTL (`absolute`: EXPIRETIME, PEXPIRETIME).
    Ttl {
        key: Bytes,
        unit: TimeUnit,
        absolute: bool,
    },
    Persist {
        key: Bytes,
    },
    Touch {
        keys: Vec<Bytes>,
    },

    // Hashes.
    HSet {
        key: Bytes,
        pairs: Vec<(Bytes, Bytes)>,
        reply_ok: bool,
    },
    HSetNx {
        key: Bytes,
        field: Bytes,
        value: Bytes,
    },
    HGet {
        key: Bytes,
        field: Bytes,
    },
    HMGet {
        key: Bytes,
        fields: Vec<Bytes>,
    },
    HDel {
        key: Bytes,
        fields: Vec<Bytes>,
    },
    HLen {
        key: Bytes,
    },
    HStrLen {
        key: Bytes,
        field: Bytes,
    },
    HExists {
        key: Bytes,
        field: Bytes,
    },
    /// HKEYS (`keys`), HVALS (`values`), HGETALL (both).
    HGetAll {
        key: Bytes,
        keys: bool,
        values: bool,
    },
    HIncrBy {
        key: Bytes,
        field: Bytes,
        increment: i64,
    },
    HIncrByFloat {
        key: Bytes,
        field: Bytes,
        increment: f64,
    },
    HRandField {
        key: Bytes,
        count: Option<i64>,
        with_values: bool,
    },

    // Lists.
    Push {
        key: Bytes,
        end: End,
        values: Vec<Bytes>,
        only_if_exists: bool,
    },
    /// LPOP and RPOP; `count` given or not changes the reply's shape.
    Pop {
        key: Bytes,
        end: End,
        count: Option<i64>,
    },
    LLen {
        key: Bytes,
    },
    LIndex {
        key: Bytes,
        index: i64,
    },
    LSet {
        key: Bytes,
        index: i64,
        value: Bytes,
    },
    LRange {
        key: Bytes,
        start: i64,
        stop: i64,
    },
    LTrim {
        key: Bytes,
        start: i64,
        stop: i64,
    },
    LInsert {
        key: Bytes,
        before: bool,
        pivot: Bytes,
        value: Bytes,
    },
    LRem {
        key: Bytes,
        count: i64,
        value: Bytes,
    },
    LPos {
        key: Bytes,
        value: Bytes,
        rank: i64,
        count: Option<i64>,
        max_len: i64,
    },
    /// LMOVE and RPOPLPUSH.
    LMove {
        from: Bytes,
        to: Bytes,
        from_end: End,
        to_end: End,
    },
    /// LMPOP: the first non-empty list of `keys`.
    LMPop {
        keys: Vec<Bytes>,
        end: End,
        count: i64,
    },

    // Sets.
    SAdd {
        key: Bytes,
        members: Vec<Bytes>,
    },
    SRem {
        key: Bytes,
        members: Vec<Bytes>,
    },
    SCard {
        key: Bytes,
    },
    SIsMember {
        key: Bytes,
        member: Bytes,
    },
    SMIsMember {
        key: Bytes,
        members: Vec<Bytes>,
    },
    SMembers {
        key: Bytes,
    },
    SRandMember {
        key: Bytes,
        count: Option<i64>,
    },
    SPop {
        key: Bytes,
        count: Option<i64>,
    },
    SMove {
        from: Bytes,
        to: Bytes,
        member: Bytes,
    },
    /// SUNION, SINTER, SDIFF, and with `store` their …STORE forms.
    SCombine {
        operation: SetOperation,
        keys: Vec<Bytes>,
        store: Option<Bytes>,
    },
    SInterCard {
        keys: Vec<Bytes>,
        limit: i64,
    },

    // Sorted sets.
    ZAdd {
        key: Bytes,
        options: ZAddOptions,
        pairs: Vec<(f64, Bytes)>,
    },
    ZIncrBy {
        key: Bytes,
        increment: f64,
        member: Bytes,
    },
    ZRem {
        key: Bytes,
        members: Vec<Bytes>,
    },
    ZCard {
        key: Bytes,
    },
    ZScore {
        key: Bytes,
        member: Bytes,
    },
    ZMScore {
        key: Bytes,
        members: Vec<Bytes>,
    },
    ZRank {
        key: Bytes,
        member: Bytes,
        reverse: bool,
    },
    ZCount {
        key: Bytes,
        min: ScoreBound,
        max: ScoreBound,
    },
    ZLexCount {
        key: Bytes,
        min: LexBound,
        max: LexBound,
    },
    ZRange {
        key: Bytes,
        range: ZRange,
        store: Option<Bytes>,
    },
    /// ZREMRANGEBYRANK, BYSCORE, BYLEX.
    ZRemRange {
        key: Bytes,
        by: ZRangeBy,
    },
    /// ZPOPMIN (`max` false) and ZPOPMAX; `count` given or not changes the reply's shape.
    ZPop {
        key: Bytes,
        max: bool,
        count: Option<i64>,
    },
    ZMPop {
        keys: Vec<Bytes>,
        max: bool,
        count: i64,
    },
    ZRandMember {
        key: Bytes,
        count: Option<i64>,
        with_scores: bool,
    },
    /// ZUNION, ZINTER, ZDIFF and their …STORE forms.
    ZCombine {
        operation: SetOperation,
        keys: Vec<Bytes>,
        weights: Option<Vec<f64>>,
        aggregate: Aggregate,
        with_scores: bool,
        store: Option<Bytes>,
    },
    ZInterCard {
        keys: Vec<Bytes>,
        limit: i64,
    },

    /// HSCAN, SSCAN, ZSCAN: `cursor` is where the last call stopped (0: the start).
    ScanCollection {
        key: Bytes,
        kind: KeyType,
        cursor: u64,
        pattern: Option<Bytes>,
        count: u64,
    },
}

impl Op {
    /// A plain SET (with NX or XX): no time to live, no GET.
    pub fn set(key: Bytes, value: Bytes, condition: SetCondition) -> Op {
        Op::Set { key, value, condition, expiry: SetExpiry::Clear, get: false, command: "set" }
    }

    /// Whether the operation may change the key space (and so needs the write gate, a redo
    /// record and a commit when it does).
    pub fn is_write(&self) -> bool {
        match self {
            Op::Set { .. }
            | Op::GetEx { .. }
            | Op::GetDel { .. }
            | Op::MSet { .. }
            | Op::MSetNx { .. }
            | Op::SetNx { .. }
            | Op::Append { .. }
            | Op::SetRange { .. }
            | Op::SetBit { .. }
            | Op::IncrBy { .. }
            | Op::IncrByFloat { .. }
            | Op::Del { .. }
            | Op::Rename { .. }
            | Op::Copy { .. }
            | Op::FlushAll
            | Op::Expire { .. }
            | Op::Persist { .. }
            | Op::HSet { .. }
            | Op::HSetNx { .. }
            | Op::HDel { .. }
            | Op::HIncrBy { .. }
            | Op::HIncrByFloat { .. }
            | Op::Push { .. }
            | Op::Pop { .. }
            | Op::LSet { .. }
            | Op::LTrim { .. }
            | Op::LInsert { .. }
            | Op::LRem { .. }
            | Op::LMove { .. }
            | Op::LMPop { .. }
            | Op::SAdd { .. }
            | Op::SRem { .. }
            | Op::SPop { .. }
            | Op::SMove { .. }
            | Op::ZAdd { .. }
            | Op::ZIncrBy { .. }
            | Op::ZRem { .. }
            | Op::ZRemRange { .. }
            | Op::ZPop { .. }
            | Op::ZMPop { .. } => true,
            Op::SCombine { store, .. }
            | Op::ZCombine { store, .. }
            | Op::ZRange { store, .. }
            | Op::Sort { store, .. } => store.is_some(),
            _ => false,
        }
    }

    /// The keys the operation reads or writes (for WATCH and the keys a blocked pop waits on).
    pub fn keys(&self) -> Vec<&Bytes> {
        match self {
            Op::MGet { keys }
            | Op::Del { keys }
            | Op::Exists { keys }
            | Op::Touch { keys }
            | Op::LMPop { keys, .. }
            | Op::ZMPop { keys, .. }
            | Op::SInterCard { keys, .. }
            | Op::ZInterCard { keys, .. } => keys.iter().collect(),
            Op::MSet { pairs } | Op::MSetNx { pairs } => pairs.iter().map(|(key, _)| key).collect(),
            Op::Rename { from, to, .. }
            | Op::Copy { from, to, .. }
            | Op::LMove { from, to, .. }
            | Op::SMove { from, to, .. } => vec![from, to],
            Op::Lcs { first, second, .. } => vec![first, second],
            Op::SCombine { keys, store, .. } | Op::ZCombine { keys, store, .. } => {
                keys.iter().chain(store.iter()).collect()
            }
            Op::ZRange { key, store, .. } | Op::Sort { key, store, .. } => {
                std::iter::once(key).chain(store.iter()).collect()
            }
            Op::RandomKey | Op::FlushAll => Vec::new(),
            Op::Get { key }
            | Op::Set { key, .. }
            | Op::GetEx { key, .. }
            | Op::GetDel { key }
            | Op::SetNx { key, .. }
            | Op::Append { key, .. }
            | Op::StrLen { key }
            | Op::GetRange { key, .. }
            | Op::SetRange { key, .. }
            | Op::SetBit { key, .. }
            | Op::GetBit { key, .. }
            | Op::MemoryUsage { key, .. }
            | Op::IncrBy { key, .. }
            | Op::IncrByFloat { key, .. }
            | Op::Type { key }
            | Op::Expire { key, .. }
            | Op::Ttl { key, .. }
            | Op::Persist { key }
            | Op::HSet { key, .. }
            | Op::HSetNx { key, .. }
            | Op::HGet { key, .. }
            | Op::HMGet { key, .. }
            | Op::HDel { key, .. }
            | Op::HLen { key }
            | Op::HStrLen { key, .. }
            | Op::HExists { key, .. }
            | Op::HGetAll { key, .. }
            | Op::HIncrBy { key, .. }
            | Op::HIncrByFloat { key, .. }
            | Op::HRandField { key, .. }
            | Op::Push { key, .. }
            | Op::Pop { key, .. }
            | Op::LLen { key }
            | Op::LIndex { key, .. }
            | Op::LSet { key, .. }
            | Op::LRange { key, .. }
            | Op::LTrim { key, .. }
            | Op::LInsert { key, .. }
            | Op::LRem { key, .. }
            | Op::LPos { key, .. }
            | Op::SAdd { key, .. }
            | Op::SRem { key, .. }
            | Op::SCard { key }
            | Op::SIsMember { key, .. }
            | Op::SMIsMember { key, .. }
            | Op::SMembers { key }
            | Op::SRandMember { key, .. }
            | Op::SPop { key, .. }
            | Op::ZAdd { key, .. }
            | Op::ZIncrBy { key, .. }
            | Op::ZRem { key, .. }
            | Op::ZCard { key }
            | Op::ZScore { key, .. }
            | Op::ZMScore { key, .. }
            | Op::ZRank { key, .. }
            | Op::ZCount { key, .. }
            | Op::ZLexCount { key, .. }
            | Op::ZRemRange { key, .. }
            | Op::ZPop { key, .. }
            | Op::ZRandMember { key, .. }
            | Op::ScanCollection { key, .. } => vec![key],
        }
    }
}

/// What an operation answers; the server encodes it in the connection's protocol.
#[derive(Debug, Clone, PartialEq)]
pub enum OpResult {
    Ok,
    /// A simple string (TYPE's `string`, `none`).
    Status(&'static str),
    /// The null bulk string.
    Nil,
    /// The null array (a pop of several keys that found none).
    NilArray,
    Value(Bytes),
    Integer(i64),
    /// A score: a double in RESP3, its `%.17g` text in RESP2 (as Redis replies ZSCORE).
    Score(f64),
    Values(Vec<Option<Bytes>>),
    Array(Vec<OpResult>),
    /// A map in RESP3, a flat array in RESP2.
    Map(Vec<(OpResult, OpResult)>),
    /// Pairs (a member and its score): an array of two-element arrays in RESP3, a flat array
    /// in RESP2 (as Redis replies ZRANGE … WITHSCORES).
    Pairs(Vec<(OpResult, OpResult)>),
    /// A set in RESP3, an array in RESP2.
    Set(Vec<OpResult>),
    /// The operation failed (the rest of the transaction still ran, as in Redis).
    Error(String),
}
