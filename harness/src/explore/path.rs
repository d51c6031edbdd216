//! A path through the state space, as the explorer's page shows it: from the initial
//! state, each step chosen by its index among the state's actions (the order the
//! explorer's clicks and stateright use, [`kvcc_model::stateright_properties`]), told as a
//! trace tells it ([`Step::new`]). A counterexample's or a trace file's actions become
//! such indices, so the page opens at exactly the path `kvcc check` printed.

use crate::trace::{Facts, Step};
use kvcc_model::{describe, Action, ContractModel, State};
use stateright::Model;

/// The steps a path may have: well past any counterexample kvcc prints, and bounded so
/// that one page cannot cost much (a URL of a few thousand indices).
pub const STEPS_MAX: usize = 4096;

/// A path walked: each step as a trace tells it, and the state it ends in.
pub struct Walk {
    /// Each step's index among its state's actions.
    pub indices: Vec<usize>,
    pub initial: Facts,
    pub steps: Vec<Step>,
    pub last: State,
}

/// Walks `indices` from the initial state; an index past a state's actions is an error
/// naming the step.
pub fn walk(model: &ContractModel, indices: &[usize]) -> Result<Walk, String> {
    if indices.len() > STEPS_MAX {
        return Err(format!(
            "a path of {} steps: the explorer shows at most {STEPS_MAX}",
            indices.len()
        ));
    }
    let initial = model.initial_state();
    let mut state = initial.clone();
    let mut steps = Vec::with_capacity(indices.len());
    let mut actions = Vec::new();
    for (depth, &index) in indices.iter().enumerate() {
        actions.clear();
        model.actions(&state, &mut actions);
        let Some(&action) = actions.get(index) else {
            return Err(format!(
                "the state after step {depth} has {} next actions, not an action {index}",
                actions.len()
            ));
        };
        let next = model
            .next_state(&state, action)
            .ok_or_else(|| format!("step {}: the action changes nothing", depth + 1))?;
        steps.push(Step::new(model, action, &state, &next));
        state = next;
    }
    Ok(Walk {
        indices: indices.to_vec(),
        initial: describe::facts(&initial),
        steps,
        last: state,
    })
}

/// The indices of a path given by its actions (a counterexample's, a trace file's); the
/// first action that is not one of its state's is an error naming the step.
pub fn indices_of(model: &ContractModel, path: &[Action]) -> Result<Vec<usize>, String> {
    let mut state = model.initial_state();
    let mut indices = Vec::with_capacity(path.len());
    let mut actions = Vec::new();
    for (depth, action) in path.iter().enumerate() {
        actions.clear();
        model.actions(&state, &mut actions);
        let index = actions.iter().position(|a| a == action).ok_or_else(|| {
            format!(
                "step {} ({}) is not one the model can take there",
                depth + 1,
                describe::action(model.topology, action)
            )
        })?;
        state = model
            .next_state(&state, *action)
            .ok_or_else(|| format!("step {}: the action changes nothing", depth + 1))?;
        indices.push(index);
    }
    Ok(indices)
}

/// One way on from a state.
pub struct Next {
    pub index: usize,
    /// What the step would do, as a trace's line tells it.
    pub description: String,
}

/// The first `max` ways on from `state`, and how many there are in all.
pub fn next(model: &ContractModel, state: &State, max: usize) -> (Vec<Next>, usize) {
    let mut actions = Vec::new();
    model.actions(state, &mut actions);
    let listed = actions
        .iter()
        .enumerate()
        .take(max)
        .filter_map(|(index, &action)| {
            let after = model.next_state(state, action)?;
            Some(Next {
                index,
                description: kvcc_model::narrate::step(model.topology, &action, state, &after),
            })
        })
        .collect();
    (listed, actions.len())
}

/// `/3/5` (after `/at`): a path's indices; `` and `/` are the initial state. None for
/// anything else.
pub fn parse(text: &str) -> Option<Vec<usize>> {
    let text = text.strip_suffix('/').unwrap_or(text);
    if text.is_empty() {
        return Some(Vec::new());
    }
    text.strip_prefix('/')?
        .split('/')
        .map(|index| {
            (!index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()))
                .then(|| index.parse().ok())
                .flatten()
        })
        .collect()
}

/// The page's address of a path: `/at/3/5`.
pub fn href(indices: &[usize]) -> String {
    let mut out = String::from("/at");
    for index in indices {
        out.push('/');
        out += &index.to_string();
    }
    if indices.is_empty() {
        out.push('/');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Spec;

    fn seed() -> ContractModel {
        let text = r#"
            version = 1
            requests = 1
            expected-count = "world-size"
            [prefill]
            tp = 1
            pcp = 2
            [decode]
            tp = 1
            [producer]
            replicated-reports = "synthetic"
            clear-replicated = true
            [expect]
            verdict = "violated"
            violates = ["eventually-freed"]
        "#;
        let spec = Spec::parse("t.toml", text.into()).unwrap();
        ContractModel::new(spec.cases(&[]).unwrap().remove(0).config)
    }

    #[test]
    fn paths_read_and_write_as_the_page_links_them() {
        assert_eq!(parse(""), Some(vec![]));
        assert_eq!(parse("/"), Some(vec![]));
        assert_eq!(parse("/0/12/"), Some(vec![0, 12]));
        assert_eq!(parse("/0//1"), None);
        assert_eq!(parse("/+1"), None);
        assert_eq!(parse("3"), None);
        assert_eq!(href(&[]), "/at/");
        assert_eq!(href(&[0, 12]), "/at/0/12");
        assert_eq!(
            parse(href(&[4, 1]).strip_prefix("/at").unwrap()),
            Some(vec![4, 1])
        );
    }

    #[test]
    fn a_path_of_actions_walks_back_to_the_same_actions() {
        let model = seed();
        let (first, _) = next(&model, &model.initial_state(), 100);
        let indices = vec![first.last().unwrap().index, 0, 0];
        let walked = walk(&model, &indices).unwrap();
        let actions: Vec<Action> = walked.steps.iter().map(|s| s.action).collect();
        assert_eq!(indices_of(&model, &actions).unwrap(), indices);
        assert!(
            walked.initial.contains_key("P req0"),
            "{:?}",
            walked.initial
        );
        assert_eq!(walked.steps.len(), 3);
    }

    /// The twins: an index past a state's actions, an action the model cannot take.
    #[test]
    fn a_path_the_model_cannot_take_is_refused_naming_the_step() {
        let model = seed();
        let err = walk(&model, &[0, 999]).err().unwrap();
        assert!(err.starts_with("the state after step 1 has "), "{err}");
        let walked = walk(&model, &[0]).unwrap();
        let twice = [walked.steps[0].action, walked.steps[0].action];
        let err = indices_of(&model, &twice).unwrap_err();
        assert!(err.starts_with("step 2 ("), "{err}");
    }
}
