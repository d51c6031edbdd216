//! Every message that crosses a boundary in a P/D deployment, and the states its receiver
//! can be in when it arrives (docs/contracts.md §11).
//!
//! The registry is the model's side of §11's table: each message names who sends it, who
//! receives it, the actions that carry it, and the delivery faults a spec can inject on
//! it. The table's cells say, for each receiver state, what vLLM's receiving code does
//! and whether kvcc models it; `tests/e2e/layout.rs` keeps the two in step, as it does
//! for the clause table of §10.

/// Who sends or receives a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Party {
    /// The client or the proxy in front of both engines.
    Client,
    PScheduler,
    /// A P worker's connector.
    PWorker,
    DScheduler,
    /// A D worker's connector.
    DWorker,
    /// A timer of the receiver's own (a lease, a connector's abort timeout).
    Timer,
}

impl Party {
    /// As §11's table writes it.
    pub fn name(self) -> &'static str {
        match self {
            Party::Client => "client",
            Party::PScheduler => "P scheduler",
            Party::PWorker => "P worker",
            Party::DScheduler => "D scheduler",
            Party::DWorker => "D worker",
            Party::Timer => "timer",
        }
    }
}

/// A delivery fault a spec may inject on a message (`[delivery]`).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
#[schemars(rename = "DeliveryFault")]
pub enum Delivery {
    /// Delivered after the receiver's own bookkeeping moved on: the message travels as an
    /// event of its own, so anything else may happen before it arrives.
    Late,
    /// Delivered twice.
    Duplicated,
    /// Never delivered.
    Lost,
}

impl Delivery {
    pub fn name(self) -> &'static str {
        match self {
            Delivery::Late => "late",
            Delivery::Duplicated => "duplicated",
            Delivery::Lost => "lost",
        }
    }
}

/// One kind of message.
#[derive(Clone, Copy, Debug)]
pub struct Message {
    /// Its name in specs (`[delivery]` keys) and in §11.
    pub name: &'static str,
    pub from: Party,
    pub to: Party,
    /// The model's actions that carry or deliver it (as traces name them).
    pub events: &'static [&'static str],
    /// The delivery faults a spec can inject on it.
    pub delivery: &'static [Delivery],
}

/// The states a receiver can be in for the request a message names: §11's columns.
pub const RECEIVER_STATES: [&str; 6] = [
    "not yet known",
    "tracked",
    "finished, free delayed",
    "freed and forgotten",
    "aborted",
    "preempted",
];

/// Every message, in §11's order.
pub const MESSAGES: &[Message] = &[
    Message {
        name: "transfer-params",
        from: Party::PScheduler,
        to: Party::DScheduler,
        events: &["DecodeAdmits", "DecodeRejects"],
        delivery: &[],
    },
    Message {
        name: "handshake",
        from: Party::DWorker,
        to: Party::PWorker,
        events: &["HandshakeCompletes"],
        delivery: &[],
    },
    Message {
        name: "read",
        from: Party::DWorker,
        to: Party::PWorker,
        events: &["ReadCompletes", "ReadFails"],
        delivery: &[],
    },
    Message {
        name: "notification",
        from: Party::DWorker,
        to: Party::PWorker,
        events: &["ReadCompletes", "NotificationArrives"],
        delivery: &[Delivery::Late, Delivery::Duplicated, Delivery::Lost],
    },
    Message {
        name: "heartbeat",
        from: Party::DWorker,
        to: Party::PWorker,
        events: &["LeaseExpires"],
        delivery: &[],
    },
    Message {
        name: "lease-expiry",
        from: Party::Timer,
        to: Party::PWorker,
        events: &["LeaseExpires"],
        delivery: &[],
    },
    Message {
        name: "send-metadata",
        from: Party::PScheduler,
        to: Party::PWorker,
        events: &["PrefillEngineSteps"],
        delivery: &[],
    },
    Message {
        name: "load-metadata",
        from: Party::DScheduler,
        to: Party::DWorker,
        events: &["DecodeEngineSteps"],
        delivery: &[],
    },
    Message {
        name: "finished-sending",
        from: Party::PWorker,
        to: Party::PScheduler,
        events: &["PrefillEngineSteps"],
        delivery: &[],
    },
    Message {
        name: "finished-recving",
        from: Party::DWorker,
        to: Party::DScheduler,
        events: &["DecodeEngineSteps", "ChildReportsAgain"],
        delivery: &[],
    },
    Message {
        name: "failed-recving",
        from: Party::DWorker,
        to: Party::DScheduler,
        events: &["DecodeEngineSteps", "ReadFails"],
        delivery: &[],
    },
    Message {
        name: "invalid-blocks",
        from: Party::DWorker,
        to: Party::DScheduler,
        events: &["DecodeEngineSteps", "ReadFails"],
        delivery: &[],
    },
    Message {
        name: "abort-at-p",
        from: Party::Client,
        to: Party::PScheduler,
        events: &["ClientAborts"],
        delivery: &[],
    },
    Message {
        name: "abort-at-d",
        from: Party::Client,
        to: Party::DScheduler,
        events: &["ClientAborts"],
        delivery: &[],
    },
];

/// The message named `name`.
pub fn message(name: &str) -> Option<&'static Message> {
    MESSAGES.iter().find(|m| m.name == name)
}
