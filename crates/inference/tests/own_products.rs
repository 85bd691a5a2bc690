//! Smart Turn's attention products on ontime's kernel (`TurnGraph::OwnAttentionKernels`, the
//! default where the CPU has AVX-512 VNNI) against ONNX Runtime's `QLinearMatMul`: the
//! load-time comparison finds every byte of the model's eight products the same, the decision
//! takes the kernel only then, and the edited session gives the published session's
//! probabilities bit for bit on every turn of the recordings.

mod common;

use common::*;
use ontime_inference::attention_matmul::fast_path_available;
use ontime_inference::turn::{product_agreement, ProductAgreement, ATTENTION_LENGTH};
use ontime_inference::{runtime, SmartTurn, TurnGraph};

#[test]
fn the_load_check_finds_every_product_byte_the_same() {
    let Some(paths) = model_paths() else { return };
    let env = runtime::load_runtime(&paths.ort_dylib).expect("runtime");
    let model = std::fs::read(&paths.smart_turn).expect("model");
    let agreement = product_agreement(&env, &model).expect("comparison");
    println!("{agreement:?}");
    // Two products a layer (Q·Kᵀ and P·V), four layers; each compared on a layer's two shapes
    // and a small odd one.
    let per_chain = 6 * 400 * ATTENTION_LENGTH + 6 * ATTENTION_LENGTH * 64 + 2 * 13 * 21;
    assert_eq!(agreement.chains, 8);
    assert_eq!(agreement.bytes_compared, 8 * per_chain);
    assert_eq!(agreement.differing, 0);
    assert!(agreement.identical());
}

#[test]
fn the_decision_takes_only_a_kernel_that_matched_every_byte() {
    let agreement = |chains, bytes_compared, differing| ProductAgreement {
        chains,
        bytes_compared,
        differing,
    };
    assert!(agreement(8, 1_000, 0).identical());
    assert!(!agreement(8, 1_000, 1).identical());
    assert!(!agreement(7, 1_000, 0).identical());
    assert!(!agreement(8, 0, 0).identical());
}

#[test]
fn the_own_products_give_the_published_probabilities_bit_for_bit() {
    let Some(paths) = model_paths() else { return };
    let env = runtime::load_runtime(&paths.ort_dylib).expect("runtime");
    let mut own = SmartTurn::load(&env, &paths.smart_turn).expect("own kernels");
    let mut published =
        SmartTurn::load_graph(&env, &paths.smart_turn, TurnGraph::Published).expect("published");
    if fast_path_available() {
        assert_eq!(own.graph(), TurnGraph::OwnAttentionKernels);
    } else {
        println!("this CPU has no AVX-512 VNNI: the products stay on ONNX Runtime's kernel");
        assert_eq!(own.graph(), TurnGraph::OwnSoftmaxKernel);
    }
    // The six recordings cut every 400 ms: 59 turns of 0.4–8 s.
    assert_eq!(assert_same_probabilities(&mut own, &mut published), 59);
}
