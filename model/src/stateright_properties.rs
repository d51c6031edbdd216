//! [`ContractModel`] as a stateright `Model` — the interface kvcc's checker, stateright's
//! own checkers and its web explorer all drive — with the contract clauses as its
//! properties, for the explorer and for cross-checking kvcc's checker against
//! stateright's.
//!
//! stateright wants `fn` pointers and `'static` names, so each clause gets a small
//! generated wrapper. A liveness clause becomes "always: where a run may end (no action
//! fairness forces), the obligation is met" — the meaning kvcc gives it on an acyclic
//! graph. stateright's own
//! `eventually` is not used: it is checked only at dead ends and can be satisfied early.

use crate::action::Action;
use crate::checker::forced_step;
use crate::model::ContractModel;
use crate::properties::{Kind, CLAUSES};
use crate::state::State;
use stateright::Property;

fn holds(index: usize, model: &ContractModel, state: &State) -> bool {
    let clause = &CLAUSES[index];
    (clause.holds)(&model.config, state)
        || (clause.kind == Kind::Liveness
            && (forced_step(model, state) || !crate::properties::safe(&model.config, state)))
}

impl stateright::Model for ContractModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![self.initial_state()]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        // A state that breaks a safety clause is where the story ends: exploring past a
        // double free or a crash tells a reviewer nothing more.
        if CLAUSES
            .iter()
            .any(|c| c.kind == Kind::Safety && !(c.holds)(&self.config, state))
        {
            return;
        }
        // stateright's explorer and the cross-checks run small specs; a state past the
        // cap shows its other actions only (kvcc's checker reports the cap instead).
        let _ = self.enabled_actions(state, actions, crate::checker::SUCCESSORS_MAX);
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        self.apply(state, action)
    }

    fn format_action(&self, action: &Action) -> String {
        crate::describe::action(self.topology, action)
    }

    fn properties(&self) -> Vec<stateright::Property<Self>> {
        all()
    }
}

macro_rules! clause_properties {
    ($($index:literal => $name:literal),* $(,)?) => {
        /// One stateright property per clause, named `property: clause`.
        pub fn all() -> Vec<Property<ContractModel>> {
            $(
                debug_assert_eq!(
                    $name,
                    format!("{}: {}", CLAUSES[$index].property, CLAUSES[$index].clause)
                );
            )*
            vec![$(Property::always($name, |m: &ContractModel, s: &State| holds($index, m, s))),*]
        }
    };
}

clause_properties! {
    0 => "no-free-under-rdma: p-blocks-freed-under-read",
    1 => "no-free-under-rdma: d-blocks-freed-under-write",
    2 => "quorum-sound: send-emitted-before-transfer-ranks-done",
    3 => "quorum-sound: send-emitted-before-offload-stores-done",
    4 => "quorum-sound: recv-emitted-before-decoders-done",
    5 => "quorum-sound: load-emitted-before-workers-done",
    6 => "exactly-once: emitted-twice",
    7 => "exactly-once: emitted-for-unknown-request",
    8 => "exactly-once: duplicate-report",
    9 => "exactly-once: report-after-emission",
    10 => "report-provenance: send-without-delayed-free",
    11 => "report-provenance: unannounced-report",
    12 => "recv-after-stable: woken-while-handle-in-flight",
    13 => "recv-after-stable: failure-reported-as-success",
    14 => "recv-after-stable: prefill-before-load-complete",
    15 => "count-conserved: countdown-reopened",
    16 => "count-conserved: report-beyond-expected",
    17 => "lease-rescues-faults-only: freed-only-by-lease-expiry",
    18 => "eventually-freed: delay-freed-request-never-freed",
    19 => "eventually-woken: loader-never-woken",
    20 => "eventually-woken: aborted-loader-never-freed",
    21 => "eventually-woken: prefill-load-never-completes",
    22 => "aggregator-drains: countdown-left-open",
    23 => "aggregator-drains: failure-left-pending",
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_property_per_clause_in_order() {
        assert_eq!(super::all().len(), super::CLAUSES.len());
    }
}
