//! Smart Turn's attention softmax on ontime's kernel (`TurnGraph::OwnSoftmaxKernel`, part of
//! the default) against ONNX Runtime's `QLinearSoftmax`: the load-time comparison tells the two
//! ways of evaluating the table's shift apart and accepts only the one that matches, and the
//! edited session gives the published session's probabilities bit for bit on every turn of
//! the recordings. (With the other shift, one of these turns' probabilities moved from 0.393
//! to 0.384: a single byte of one attention row is enough to move a verdict.)

mod common;

use common::*;
use ontime_inference::attention_softmax::ShiftLog;
use ontime_inference::turn::{softmax_agreement, SoftmaxAgreement, ATTENTION_LENGTH};
use ontime_inference::{runtime, SmartTurn, TurnGraph};

#[test]
fn the_load_check_tells_the_two_shifts_apart_and_accepts_the_one_that_matches() {
    let Some(paths) = model_paths() else { return };
    let env = runtime::load_runtime(&paths.ort_dylib).expect("runtime");
    let model = std::fs::read(&paths.smart_turn).expect("model");
    let agreement = softmax_agreement(&env, &model).expect("comparison");
    println!("{agreement:?}");
    // Smart Turn v3.2's four attention softmaxes, 1 200 fixed rows each, and the one row of
    // the fixed search that tells the shifts apart on this model's scales.
    assert_eq!(agreement.chains, 4);
    assert_eq!(agreement.telling_rows, 1);
    assert_eq!(agreement.bytes_compared, (4 * 1_200 + 1) * ATTENTION_LENGTH);
    // ONNX Runtime evaluates the shift's log in f32: that kernel matches every byte, the other
    // misses one, on the telling row.
    assert_eq!(
        agreement.differing,
        vec![(ShiftLog::Double, 1), (ShiftLog::Single, 0)]
    );
    assert_eq!(agreement.identical(), Some(ShiftLog::Single));
}

#[test]
fn the_decision_takes_only_a_kernel_that_matched_every_byte() {
    let agreement = |chains, double, single| SoftmaxAgreement {
        chains,
        bytes_compared: 1_000,
        telling_rows: 1,
        differing: vec![(ShiftLog::Double, double), (ShiftLog::Single, single)],
    };
    assert_eq!(agreement(4, 0, 3).identical(), Some(ShiftLog::Double));
    assert_eq!(agreement(4, 3, 0).identical(), Some(ShiftLog::Single));
    // No row told them apart: the shift ONNX Runtime's source evaluates.
    assert_eq!(agreement(4, 0, 0).identical(), Some(ShiftLog::Single));
    // A byte off in each, or a model without Smart Turn's four chains: ONNX Runtime's kernel.
    assert_eq!(agreement(4, 1, 2).identical(), None);
    assert_eq!(agreement(3, 0, 0).identical(), None);
    assert_eq!(agreement(0, 0, 0).identical(), None);
}

#[test]
fn the_own_kernel_gives_the_published_probabilities_bit_for_bit() {
    let Some(paths) = model_paths() else { return };
    let env = runtime::load_runtime(&paths.ort_dylib).expect("runtime");
    let mut own = SmartTurn::load_graph(&env, &paths.smart_turn, TurnGraph::OwnSoftmaxKernel)
        .expect("own kernel");
    let mut published =
        SmartTurn::load_graph(&env, &paths.smart_turn, TurnGraph::Published).expect("published");
    assert_eq!(own.graph(), TurnGraph::OwnSoftmaxKernel);
    assert_eq!(published.graph(), TurnGraph::Published);

    // The six recordings cut every 400 ms: 59 turns of 0.4–8 s.
    assert_eq!(assert_same_probabilities(&mut own, &mut published), 59);
}
