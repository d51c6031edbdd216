//! States as short byte strings. The checker keeps every frontier state packed (tens of
//! bytes instead of hundreds) and fingerprints the packed bytes; the topology, shared by
//! every state of a model, is left out and put back on unpacking.

use crate::state::{
    DecodeCell, HandlePhase, Incidents, PrefillCell, Request, RequestId, Shape, State,
};
use crate::topology::Topology;
use bincode::Options;
use kvcc_aggregator::Aggregator;
use smallvec::SmallVec;

fn options() -> impl Options {
    // Variable-length integers: most cells and counts are tiny.
    bincode::DefaultOptions::new()
}

type Borrowed<'a> = (
    &'a [Request],
    &'a [PrefillCell],
    &'a [HandlePhase],
    &'a [DecodeCell],
    &'a Aggregator<RequestId>,
    &'a Aggregator<RequestId>,
    Incidents,
    u8,
);

type Owned = (
    SmallVec<[Request; 3]>,
    SmallVec<[PrefillCell; 16]>,
    SmallVec<[HandlePhase; 16]>,
    SmallVec<[DecodeCell; 16]>,
    Aggregator<RequestId>,
    Aggregator<RequestId>,
    Incidents,
    u8,
);

/// Appends `state`'s packed bytes to `out`.
pub fn pack(state: &State, out: &mut Vec<u8>) {
    let fields: Borrowed<'_> = (
        &state.requests,
        &state.prefill,
        &state.handles,
        &state.decode,
        &state.prefill_aggregator,
        &state.decode_aggregator,
        state.incidents,
        state.once,
    );
    options()
        .serialize_into(out, &fields)
        .expect("serializing into memory cannot fail");
}

/// The state `pack` wrote, with its topology put back.
pub fn unpack(topology: &'static Topology, bytes: &[u8]) -> State {
    let (
        requests,
        prefill,
        handles,
        decode,
        prefill_aggregator,
        decode_aggregator,
        incidents,
        once,
    ): Owned = options().deserialize(bytes).expect("bytes written by pack");
    State {
        requests,
        prefill,
        handles,
        decode,
        prefill_aggregator,
        decode_aggregator,
        incidents,
        once,
        shape: Shape(topology),
    }
}
