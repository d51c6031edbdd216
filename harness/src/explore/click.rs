//! One click in the explorer: `GET /.states/<init>/<action>/...` asks for the successors
//! of the state at the end of that path, as JSON that stateright's page reads. kvcc
//! answers it itself, on the gate's thread for the connection, instead of forwarding it:
//! stateright replays the whole path from the initial state once per successor, lists
//! every successor with its whole state, and cannot be stopped, so one state with 3,724
//! successors took 75 s and a 130 MB answer on stateright's one server thread, and the
//! work went on after the client gave up.
//!
//! Here the path is replayed once; at most [`Limits::successors_max`] successors are
//! listed, and a last entry without a state says how many were left out; and the work is
//! checked between steps, so it stops when the click's deadline passes (what was listed
//! is answered, with the last entry saying so) or when the client leaves (nothing is).
//! Indices mean what they mean to stateright, since both ask the same adapter
//! (`kvcc_model::stateright_properties`) for a state's actions: a discovery's path, which
//! stateright encodes, leads to the same state here.

use kvcc_model::ContractModel;
use serde_json::{json, Value};
use stateright::Model;
use std::time::Duration;

/// What one click may cost.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Successors listed; the rest are counted in a last entry.
    pub successors_max: usize,
    /// Time for the whole click, path replay included.
    pub deadline: Duration,
}

/// Why a click stopped before its answer was whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    Deadline,
    ClientGone,
}

/// What a click is answered with.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// The JSON list the page reads.
    Steps(Vec<u8>),
    /// No state at this path (stateright answers 404 too), and why.
    NotFound(String),
    /// Stopped: past the deadline before anything could be listed, or the client left.
    Stopped(Stop),
}

/// Answers a click on `path` (what follows `/.states`). `properties` is stateright's
/// list of the model's properties and their discoveries, which every entry carries;
/// `go_on` says whether the work may go on, and is asked before each step of it.
pub fn answer(
    model: &ContractModel,
    path: &str,
    properties: &Value,
    limits: &Limits,
    mut go_on: impl FnMut() -> Result<(), Stop>,
) -> Answer {
    let Some(indices) = indices(path) else {
        return Answer::NotFound(format!("Unable to parse action indices {path}"));
    };
    let Some((&first, path_actions)) = indices.split_first() else {
        return Answer::Steps(initial_states(model, properties, limits));
    };
    let Some(mut state) = model.init_states().get(first).cloned() else {
        return Answer::NotFound(format!("no initial state {first}"));
    };
    let mut actions = Vec::new();
    for (depth, &index) in path_actions.iter().enumerate() {
        if let Err(stop) = go_on() {
            return Answer::Stopped(stop);
        }
        actions.clear();
        model.actions(&state, &mut actions);
        let Some(&action) = actions.get(index) else {
            return Answer::NotFound(format!(
                "the state after {} actions has {} successors, not a successor {index}",
                depth,
                actions.len()
            ));
        };
        if let Some(next) = model.next_state(&state, action) {
            state = next;
        }
    }
    actions.clear();
    model.actions(&state, &mut actions);
    let mut steps = Vec::new();
    let mut stopped = false;
    for (index, &action) in actions.iter().take(limits.successors_max).enumerate() {
        match go_on() {
            Ok(()) => {}
            Err(Stop::Deadline) if !steps.is_empty() => {
                stopped = true;
                break;
            }
            Err(stop) => return Answer::Stopped(stop),
        }
        let mut step = json!({
            "action": model.format_action(&action),
            "properties": properties,
            "actionIndex": index,
        });
        if let Some(next) = model.next_state(&state, action) {
            if let Some(outcome) = model.format_step(&state, action) {
                step["outcome"] = outcome.into();
            }
            step["state"] = format!("{next:#?}").into();
        }
        steps.push(step);
    }
    let left_out = actions.len() - steps.len();
    if left_out > 0 {
        // No state and no index: the page shows it as an entry that leads nowhere.
        let why = if stopped {
            format!(
                "listing stopped at the {} s deadline of one click",
                limits.deadline.as_secs_f64()
            )
        } else {
            format!(
                "the explorer lists a state's first {} (kvcc explore --successors-max N lists more)",
                limits.successors_max
            )
        };
        steps.push(json!({
            "action": format!("… {left_out} more of {} successors not listed: {why}", actions.len()),
            "properties": properties,
        }));
    }
    Answer::Steps(serde_json::to_vec(&steps).unwrap_or_default())
}

/// The initial states, as the page's first list.
fn initial_states(model: &ContractModel, properties: &Value, limits: &Limits) -> Vec<u8> {
    let steps: Vec<Value> = model
        .init_states()
        .iter()
        .take(limits.successors_max)
        .enumerate()
        .map(|(index, state)| {
            json!({
                "state": format!("{state:#?}"),
                "properties": properties,
                "actionIndex": index,
            })
        })
        .collect();
    serde_json::to_vec(&steps).unwrap_or_default()
}

/// The action indices of a path: `` or `/` for the initial states, `/0/3` (a trailing
/// `/` allowed) for the state reached from initial state 0 by its action 3.
fn indices(path: &str) -> Option<Vec<usize>> {
    let path = path.strip_suffix('/').unwrap_or(path);
    if path.is_empty() {
        return Some(Vec::new());
    }
    path.strip_prefix('/')?
        .split('/')
        .map(|index| {
            index
                .bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| index.parse().ok())
                .flatten()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Spec;

    /// A spec whose second state has a few successors.
    fn model() -> ContractModel {
        let text = r#"
            version = 1
            requests = 2
            expected-count = "world-size"
            [prefill]
            tp = 2
            [decode]
            tp = 1
            [expect]
            verdict = "holds"
        "#;
        let spec = Spec::parse("t.toml", text.into()).unwrap();
        ContractModel::new(spec.cases(&[]).unwrap().remove(0).config)
    }

    const LIMITS: Limits = Limits {
        successors_max: 200,
        deadline: Duration::from_secs(10),
    };

    fn steps(answer: Answer) -> Vec<Value> {
        match answer {
            Answer::Steps(bytes) => serde_json::from_slice(&bytes).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    fn click(path: &str, limits: &Limits) -> Answer {
        answer(&model(), path, &json!([]), limits, || Ok(()))
    }

    #[test]
    fn paths_read_as_stateright_reads_them() {
        assert_eq!(indices(""), Some(vec![]));
        assert_eq!(indices("/"), Some(vec![]));
        assert_eq!(indices("/0/12/"), Some(vec![0, 12]));
        assert_eq!(indices("/0//1"), None);
        assert_eq!(indices("/+1"), None);
        assert_eq!(indices("/x"), None);
        assert_eq!(indices("0"), None);
    }

    #[test]
    fn a_click_lists_each_successor_with_its_state() {
        let init = steps(click("", &LIMITS));
        assert_eq!(init.len(), 1);
        assert!(init[0]["state"].as_str().unwrap().contains("P req0"));
        let next = steps(click("/0", &LIMITS));
        assert!(next.len() >= 2, "{next:?}");
        for (i, step) in next.iter().enumerate() {
            assert_eq!(step["actionIndex"], i);
            assert!(step["state"].is_string(), "{step}");
            assert!(step["outcome"].is_string(), "{step}");
        }
        assert!(matches!(click("/0/99", &LIMITS), Answer::NotFound(_)));
        assert!(matches!(click("/1", &LIMITS), Answer::NotFound(_)));
    }

    #[test]
    fn successors_past_the_cap_are_counted_in_a_last_entry() {
        let all = steps(click("/0", &LIMITS)).len();
        let one = Limits {
            successors_max: 1,
            ..LIMITS
        };
        let listed = steps(click("/0", &one));
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0]["actionIndex"], 0);
        let last = &listed[1];
        assert!(last.get("state").is_none() && last.get("actionIndex").is_none());
        let text = last["action"].as_str().unwrap();
        assert!(
            text.starts_with(&format!(
                "… {} more of {all} successors not listed",
                all - 1
            )),
            "{text}"
        );
    }

    #[test]
    fn the_work_stops_at_the_deadline_and_when_the_client_leaves() {
        // Past the deadline after the first successor: it is listed, and the rest counted.
        let mut asked = 0;
        let answered = answer(&model(), "/0", &json!([]), &LIMITS, || {
            asked += 1;
            if asked > 1 {
                Err(Stop::Deadline)
            } else {
                Ok(())
            }
        });
        let listed = steps(answered);
        assert_eq!(listed.len(), 2);
        assert!(
            listed[1]["action"]
                .as_str()
                .unwrap()
                .contains("listing stopped at the 10 s deadline"),
            "{listed:?}"
        );
        // Past it while replaying the path, or with nothing listed yet: nothing to answer.
        let late = answer(&model(), "/0/0", &json!([]), &LIMITS, || {
            Err(Stop::Deadline)
        });
        assert_eq!(late, Answer::Stopped(Stop::Deadline));
        // A client that left stops the work at once, whatever was listed.
        let mut asked = 0;
        let gone = answer(&model(), "/0", &json!([]), &LIMITS, || {
            asked += 1;
            if asked > 1 {
                Err(Stop::ClientGone)
            } else {
                Ok(())
            }
        });
        assert_eq!(gone, Answer::Stopped(Stop::ClientGone));
        assert_eq!(asked, 2);
    }
}
