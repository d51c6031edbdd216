//! [`ContractModel`] as a stateright `Model` — the interface kvcc's checker, stateright's
//! own checkers and its web explorer all drive — with the contract clauses as its
//! properties, for the explorer and for cross-checking kvcc's checker against
//! stateright's.
//!
//! stateright wants `fn` pointers and `'static` names: each clause gets a generic wrapper
//! and its name comes from the registry, built once. A liveness clause becomes "always: where a run may end (no action
//! fairness forces), the obligation is met" — the meaning kvcc gives it on an acyclic
//! graph. stateright's own
//! `eventually` is not used: it is checked only at dead ends and can be satisfied early.

use crate::action::Action;
use crate::checker::forced_step;
use crate::model::ContractModel;
use crate::properties::{Kind, CLAUSES};
use crate::state::State;
use stateright::Property;

/// A liveness clause is judged only where a run may end with every safety clause kept,
/// with or without [`ContractModel::past_violations`] (docs/contracts.md, "Verdicts").
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
        // A state that breaks a safety clause is where the story ends, unless the spec
        // asks to explore past it (`[expect] past-violations`), as kvcc's checker does:
        // then a later clause the same bug breaks is reached too.
        if !self.past_violations && !crate::properties::safe(&self.config, state) {
            return;
        }
        // stateright's explorer and the cross-checks run small specs; a state past the
        // cap shows its other actions only (kvcc's checker reports the cap instead).
        let _ = self.enabled_actions(state, actions, crate::checker::SUCCESSORS_MAX);
        // An action that would change nothing is not a transition: the explorer offers
        // only steps that go somewhere.
        actions.retain(|&a| self.apply(state, a).is_some());
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        self.apply(state, action)
    }

    fn format_action(&self, action: &Action) -> String {
        crate::describe::action(self.topology, action)
    }

    /// The explorer's view of a step: what it did and every fact after it, the changed
    /// ones marked (see [`crate::narrate::explained`]).
    fn format_step(&self, last_state: &State, action: Action) -> Option<String> {
        let next = self.apply(last_state, action)?;
        Some(crate::narrate::explained(
            self.topology,
            &action,
            last_state,
            &next,
        ))
    }

    fn properties(&self) -> Vec<stateright::Property<Self>> {
        all()
    }
}

/// Clause `I`'s rule as the `fn` pointer stateright wants.
fn holds_at<const I: usize>(model: &ContractModel, state: &State) -> bool {
    holds(I, model, state)
}

/// One wrapper per clause of the registry, in its order; the length is checked at
/// compile time, so a clause added to `CLAUSES` without a wrapper does not build.
const RULES: [fn(&ContractModel, &State) -> bool; 29] = [
    holds_at::<0>,
    holds_at::<1>,
    holds_at::<2>,
    holds_at::<3>,
    holds_at::<4>,
    holds_at::<5>,
    holds_at::<6>,
    holds_at::<7>,
    holds_at::<8>,
    holds_at::<9>,
    holds_at::<10>,
    holds_at::<11>,
    holds_at::<12>,
    holds_at::<13>,
    holds_at::<14>,
    holds_at::<15>,
    holds_at::<16>,
    holds_at::<17>,
    holds_at::<18>,
    holds_at::<19>,
    holds_at::<20>,
    holds_at::<21>,
    holds_at::<22>,
    holds_at::<23>,
    holds_at::<24>,
    holds_at::<25>,
    holds_at::<26>,
    holds_at::<27>,
    holds_at::<28>,
];
const _: () = assert!(RULES.len() == CLAUSES.len());

/// A clause's name in the explorer, from the registry: `property: clause`, and for a
/// liveness clause what stateright's "always" means for it.
pub fn name(clause: usize) -> &'static str {
    static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        CLAUSES
            .iter()
            .map(|c| {
                let name = match c.kind {
                    Kind::Safety => format!("{}: {}", c.property, c.clause),
                    Kind::Liveness => format!(
                        "{}: {} (liveness: met wherever a run may end)",
                        c.property, c.clause
                    ),
                };
                &*Box::leak(name.into_boxed_str())
            })
            .collect()
    })[clause]
}

/// One stateright property per clause, named by [`name`].
pub fn all() -> Vec<Property<ContractModel>> {
    RULES
        .iter()
        .enumerate()
        .map(|(i, &rule)| Property::always(name(i), rule))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_property_per_clause_in_order() {
        assert_eq!(all().len(), CLAUSES.len());
        for (i, clause) in CLAUSES.iter().enumerate() {
            let name = name(i);
            assert!(name.starts_with(&format!("{}: {}", clause.property, clause.clause)));
            // Issue 11: the explorer labels liveness as liveness, and only liveness.
            assert_eq!(
                name.contains("(liveness"),
                clause.kind == Kind::Liveness,
                "{name}"
            );
        }
    }
}
