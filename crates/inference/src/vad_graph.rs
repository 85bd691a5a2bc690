//! Silero VAD's 8 kHz graph without its control flow.
//!
//! The published `silero_vad.onnx` holds both sample rates behind an `If` on `sr`, and each
//! branch, exported from PyTorch, carries the shape logic of its LSTM wrapper as more `If`s
//! (squeeze when a dimension is 1, unsqueeze when the input is 2-D) and `Shape`, `Gather`,
//! `Equal`, `Unsqueeze` and `Identity` nodes around them: 55 nodes per run, of which seven do
//! the arithmetic (the STFT's and the encoder's convolutions, the LSTM, the decoder's
//! convolution). Every node costs ONNX Runtime's executor a dispatch, and at the gateway's
//! cadence (one batch every 32 ms, the caches cold) that overhead is a large part of a run:
//! docs/inference.md, *The VAD's graph without its control flow*.
//!
//! [`lean_silero_8k`] builds the graph the 8 kHz branch computes for ontime's input, a
//! `[B, 288]` window (32 samples of context, then a 256-sample chunk), as 26 nodes (20 a run once
//! ONNX Runtime has fused them, counted as the published graph's 55 were): the same
//! operators with the same weights and attributes, the control flow resolved for that window.
//! With 288 samples the encoder's output has one time step, so every `If` of the branch takes
//! the same side for any batch size `B`: the squeeze of the time axis, the LSTM's 3-D input and
//! state as ONNX Runtime's `LSTM` wants them, and its `[B, 128]` results. The LSTM's gate
//! reordering (PyTorch's i, f, g, o rows to ONNX's i, o, f, c), which the export did with
//! `Slice` and `Concat` on the weights, is done here once, on the weights' bytes. Only
//! reshaping operators were replaced by others (`Squeeze`/`Unsqueeze` pairs by `Reshape`, two
//! `Gather`s by one `Split`), and a mean over one element went (`x / 1` is `x`), so the
//! arithmetic is the branch's own: [`crate::vad::SileroVad::load`] checks that the two graphs
//! give bit-identical probabilities and states before it uses this one.
//!
//! The `sr` input stays (unused), so the lean graph is fed exactly as the published one; it
//! computes the 8 kHz model whatever `sr` says.

use crate::onnx_wire::{
    attr_int, attr_ints, attr_str, malformed, put_len_field, read_varint, tensor, value_info,
    varint, Dim, Fields, Node, ATTR_G, ATTR_NAME, ATTR_T, FLOAT, GRAPH_INITIALIZER, GRAPH_INPUT,
    GRAPH_NAME, GRAPH_NODE, GRAPH_OUTPUT, INT64, MODEL_GRAPH, MODEL_IR_VERSION, MODEL_OPSET_IMPORT,
    NODE_ATTRIBUTE, NODE_INPUT, NODE_NAME, NODE_OP_TYPE, NODE_OUTPUT, TENSOR_DATA_TYPE,
    TENSOR_DIMS, TENSOR_INT64_DATA, TENSOR_NAME, TENSOR_RAW_DATA, WIRE_LEN, WIRE_VARINT,
};
use crate::Result;

/// The sample rate whose branch this builds, and the one the published `If` tests `sr` for.
const RATE_8K: i64 = 8000;
const RATE_16K: i64 = 16000;
/// Silero's 8 kHz STFT: 128-sample frames every 64, 65 bins (real and imaginary rows).
const STFT_FRAME: i64 = 128;
const STFT_HOP: i64 = 64;
const STFT_BINS: i64 = 65;
/// Samples reflected onto the window's end before the STFT.
const STFT_PAD: i64 = 32;
/// The LSTM's width, and the strides of the four encoder convolutions.
const HIDDEN: i64 = 128;
const ENCODER_STRIDES: [i64; 4] = [1, 2, 2, 1];

/// The weights the lean graph reads, by their names in the branch, with their shapes.
const WEIGHTS: [(&str, &[i64]); 15] = [
    ("stft.forward_basis_buffer", &[2 * STFT_BINS, 1, STFT_FRAME]),
    ("encoder.0.reparam_conv.weight", &[128, STFT_BINS, 3]),
    ("encoder.0.reparam_conv.bias", &[128]),
    ("encoder.1.reparam_conv.weight", &[64, 128, 3]),
    ("encoder.1.reparam_conv.bias", &[64]),
    ("encoder.2.reparam_conv.weight", &[64, 64, 3]),
    ("encoder.2.reparam_conv.bias", &[64]),
    ("encoder.3.reparam_conv.weight", &[HIDDEN, 64, 3]),
    ("encoder.3.reparam_conv.bias", &[HIDDEN]),
    ("decoder.rnn.weight_ih", &[4 * HIDDEN, HIDDEN]),
    ("decoder.rnn.weight_hh", &[4 * HIDDEN, HIDDEN]),
    ("decoder.rnn.bias_ih", &[4 * HIDDEN]),
    ("decoder.rnn.bias_hh", &[4 * HIDDEN]),
    ("decoder.decoder.2.weight", &[1, HIDDEN, 1]),
    ("decoder.decoder.2.bias", &[1]),
];

/// A float tensor found in the branch: its shape and little-endian bytes.
#[derive(Debug, Clone)]
struct Weight<'a> {
    dims: Vec<i64>,
    raw: &'a [u8],
}

/// The lean 8 kHz graph of the published Silero VAD model (`silero-vad` 6.2.3), encoded as an
/// ONNX model.
pub fn lean_silero_8k(model: &[u8]) -> Result<Vec<u8>> {
    let mut graph = None;
    let mut kept = Vec::new();
    for field in Fields::new(model) {
        let field = field?;
        match field.number {
            MODEL_GRAPH if field.wire == WIRE_LEN => graph = Some(field.payload),
            MODEL_IR_VERSION | MODEL_OPSET_IMPORT => kept.push(field.raw),
            _ => {}
        }
    }
    let graph = graph.ok_or_else(|| malformed("no graph in the model"))?;
    let branch = branch_8k(graph)?;
    let mut weights: Vec<Option<Weight>> = vec![None; WEIGHTS.len()];
    collect_weights(branch, &mut weights, 0)?;
    let mut found = Vec::with_capacity(WEIGHTS.len());
    for ((name, dims), weight) in WEIGHTS.iter().zip(weights) {
        let weight =
            weight.ok_or_else(|| malformed(&format!("no `{name}` in the 8 kHz branch")))?;
        if weight.dims != *dims {
            return Err(malformed(&format!(
                "`{name}` is {:?}, the pinned Silero VAD's is {dims:?}",
                weight.dims
            )));
        }
        found.push(weight);
    }

    let mut out = Vec::new();
    for raw in kept {
        out.extend_from_slice(raw);
    }
    put_len_field(&mut out, MODEL_GRAPH, &lean_graph(&found));
    Ok(out)
}

/// The payload of the published `If`'s branch for 8 kHz: the one taken when `sr` is not
/// 16 000 (`Equal(sr, 16000)` is the condition), or taken when it is 8 000.
fn branch_8k(graph: &[u8]) -> Result<&[u8]> {
    let mut nodes = Vec::new();
    for field in Fields::new(graph) {
        let field = field?;
        if field.wire == WIRE_LEN && field.number == GRAPH_NODE {
            nodes.push(Node::parse(field.payload)?);
        }
    }
    let mut ifs = nodes.iter().filter(|n| n.is("If"));
    let (Some(branch_if), None) = (ifs.next(), ifs.next()) else {
        return Err(malformed("not one `If` on `sr` at the top of the graph"));
    };
    let condition = *branch_if
        .inputs
        .first()
        .ok_or_else(|| malformed("an `If` without a condition"))?;
    let equal = nodes
        .iter()
        .find(|n| n.is("Equal") && n.outputs.first() == Some(&condition))
        .ok_or_else(|| malformed("the `If`'s condition is not an `Equal`"))?;
    let [a, b] = equal.inputs[..] else {
        return Err(malformed("an `Equal` without two inputs"));
    };
    let constant = match (a, b) {
        (b"sr", c) | (c, b"sr") => c,
        _ => return Err(malformed("the `If` does not test `sr`")),
    };
    let rate = nodes
        .iter()
        .find(|n| n.is("Constant") && n.outputs.first() == Some(&constant))
        .ok_or_else(|| malformed("`sr` is not compared with a constant"))
        .and_then(constant_i64)?;
    let wanted: &[u8] = match rate {
        RATE_16K => b"else_branch",
        RATE_8K => b"then_branch",
        other => return Err(malformed(&format!("`sr` compared with {other}"))),
    };
    for attribute in &branch_if.attributes {
        let (name, graph) = attribute_name_and_graph(attribute)?;
        if name == wanted {
            return graph.ok_or_else(|| malformed("an `If` branch without a graph"));
        }
    }
    Err(malformed("the `If` has no 8 kHz branch"))
}

/// An attribute's name and, for a graph attribute, its graph.
fn attribute_name_and_graph(attribute: &[u8]) -> Result<(&[u8], Option<&[u8]>)> {
    let (mut name, mut graph) = (&[][..], None);
    for field in Fields::new(attribute) {
        let field = field?;
        match (field.number, field.wire) {
            (ATTR_NAME, WIRE_LEN) => name = field.payload,
            (ATTR_G, WIRE_LEN) => graph = Some(field.payload),
            _ => {}
        }
    }
    Ok((name, graph))
}

/// The single int64 a `Constant` node holds.
fn constant_i64(node: &Node) -> Result<i64> {
    for attribute in &node.attributes {
        for field in Fields::new(attribute) {
            let field = field?;
            if field.number != ATTR_T || field.wire != WIRE_LEN {
                continue;
            }
            for t in Fields::new(field.payload) {
                let t = t?;
                match (t.number, t.wire) {
                    (TENSOR_INT64_DATA, WIRE_VARINT) => return Ok(varint_i64(t.payload)),
                    // Packed: the first value.
                    (TENSOR_INT64_DATA, WIRE_LEN) => return varint(t.payload).map(|v| v as i64),
                    (TENSOR_RAW_DATA, WIRE_LEN) if t.payload.len() == 8 => {
                        let mut b = [0u8; 8];
                        b.copy_from_slice(t.payload);
                        return Ok(i64::from_le_bytes(b));
                    }
                    _ => {}
                }
            }
        }
    }
    Err(malformed("a `Constant` without one int64"))
}

/// A varint field's payload (its bytes after the key) as the int64 it encodes.
fn varint_i64(payload: &[u8]) -> i64 {
    varint(payload).map_or(0, |v| v as i64)
}

/// Subgraphs nest three deep in the published branch; deeper is not the pinned model.
const MAX_DEPTH: usize = 8;

/// Every `Constant` tensor in `graph` and its subgraphs whose name is one of [`WEIGHTS`].
fn collect_weights<'a>(
    graph: &'a [u8],
    found: &mut [Option<Weight<'a>>],
    depth: usize,
) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(malformed("subgraphs nested too deep"));
    }
    for field in Fields::new(graph) {
        let field = field?;
        if field.wire != WIRE_LEN || field.number != GRAPH_NODE {
            continue;
        }
        let node = Node::parse(field.payload)?;
        for attribute in &node.attributes {
            for a in Fields::new(attribute) {
                let a = a?;
                match (a.number, a.wire) {
                    (ATTR_G, WIRE_LEN) => collect_weights(a.payload, found, depth + 1)?,
                    (ATTR_T, WIRE_LEN) if node.is("Constant") => {
                        if let Some((i, weight)) = parse_weight(a.payload)? {
                            if found[i].is_some() {
                                return Err(malformed("a weight twice in the 8 kHz branch"));
                            }
                            found[i] = Some(weight);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(())
}

/// A `TensorProto` that is one of [`WEIGHTS`], as its index there and its contents.
fn parse_weight(tensor: &[u8]) -> Result<Option<(usize, Weight<'_>)>> {
    let (mut name, mut data_type, mut raw, mut dims) = (&[][..], None, None, Vec::new());
    for field in Fields::new(tensor) {
        let field = field?;
        match (field.number, field.wire) {
            (TENSOR_NAME, WIRE_LEN) => name = field.payload,
            (TENSOR_DATA_TYPE, WIRE_VARINT) => data_type = Some(varint_i64(field.payload)),
            (TENSOR_RAW_DATA, WIRE_LEN) => raw = Some(field.payload),
            (TENSOR_DIMS, WIRE_VARINT) => dims.push(varint_i64(field.payload)),
            (TENSOR_DIMS, WIRE_LEN) => {
                let mut at = 0;
                while at < field.payload.len() {
                    dims.push(read_varint(field.payload, &mut at)? as i64);
                }
            }
            _ => {}
        }
    }
    let Some(i) = WEIGHTS.iter().position(|(n, _)| n.as_bytes() == name) else {
        return Ok(None);
    };
    let label = WEIGHTS[i].0;
    if data_type != Some(FLOAT as i64) {
        return Err(malformed(&format!("`{label}` is not float")));
    }
    let raw = raw.ok_or_else(|| malformed(&format!("`{label}` is not stored as raw data")))?;
    let elements: i64 = dims.iter().product();
    if usize::try_from(elements).ok().map(|n| n * 4) != Some(raw.len()) {
        return Err(malformed(&format!(
            "`{label}` has the wrong number of bytes"
        )));
    }
    Ok(Some((i, Weight { dims, raw })))
}

/// PyTorch's LSTM gate rows (input, forget, cell, output) in ONNX's order (input, output,
/// forget, cell), as the export's `Slice`s took them: rows 0..128, 384..512, 128..384.
fn onnx_gate_order(raw: &[u8], row_bytes: usize) -> Vec<u8> {
    let h = HIDDEN as usize * row_bytes;
    let mut out = Vec::with_capacity(raw.len());
    out.extend_from_slice(&raw[..h]);
    out.extend_from_slice(&raw[3 * h..4 * h]);
    out.extend_from_slice(&raw[h..3 * h]);
    out
}

/// The lean graph over the branch's weights, in [`WEIGHTS`] order.
fn lean_graph(w: &[Weight]) -> Vec<u8> {
    let mut g = Vec::new();
    let mut node = |op: &str, inputs: &[&str], outputs: &[&str], attrs: &[Vec<u8>]| {
        let mut n = Vec::new();
        for i in inputs {
            put_len_field(&mut n, NODE_INPUT, i.as_bytes());
        }
        for o in outputs {
            put_len_field(&mut n, NODE_OUTPUT, o.as_bytes());
        }
        put_len_field(&mut n, NODE_NAME, outputs[0].as_bytes());
        put_len_field(&mut n, NODE_OP_TYPE, op.as_bytes());
        for a in attrs {
            put_len_field(&mut n, NODE_ATTRIBUTE, a);
        }
        put_len_field(&mut g, GRAPH_NODE, &n);
    };
    let conv = |kernel: i64, pad: i64, stride: i64| {
        vec![
            attr_ints("dilations", &[1]),
            attr_int("group", 1),
            attr_ints("kernel_shape", &[kernel]),
            attr_ints("pads", &[pad, pad]),
            attr_ints("strides", &[stride]),
        ]
    };

    // The STFT: the window reflected at its end, one channel, magnitudes of 65 bins.
    node(
        "Pad",
        &["input", "pads"],
        &["padded"],
        &[attr_str("mode", "reflect")],
    );
    node("Unsqueeze", &["padded", "axis1"], &["frames_in"], &[]);
    node(
        "Conv",
        &["frames_in", "stft.forward_basis_buffer"],
        &["spectrum"],
        &conv(STFT_FRAME, 0, STFT_HOP),
    );
    node(
        "Slice",
        &["spectrum", "zero", "bins", "axis1"],
        &["real"],
        &[],
    );
    node(
        "Slice",
        &["spectrum", "bins", "two_bins", "axis1"],
        &["imag"],
        &[],
    );
    node("Pow", &["real", "two"], &["real2"], &[]);
    node("Pow", &["imag", "two"], &["imag2"], &[]);
    node("Add", &["real2", "imag2"], &["power"], &[]);
    node("Sqrt", &["power"], &["magnitude"], &[]);
    // The encoder.
    let names = ["encoder0", "encoder1", "encoder2", "encoder3"];
    let mut x = "magnitude".to_string();
    for (i, stride) in ENCODER_STRIDES.iter().enumerate() {
        let weight = format!("encoder.{i}.reparam_conv.weight");
        let bias = format!("encoder.{i}.reparam_conv.bias");
        let conv_out = format!("{}_conv", names[i]);
        node(
            "Conv",
            &[&x, &weight, &bias],
            &[&conv_out],
            &conv(3, 1, *stride),
        );
        node("Relu", &[&conv_out], &[names[i]], &[]);
        x = names[i].to_string();
    }
    // One LSTM step from the state, `[1, B, 128]` in and out.
    node("Reshape", &[&x, "step_shape"], &["step"], &[]);
    node("Split", &["state"], &["h0", "c0"], &[attr_int("axis", 0)]);
    node(
        "LSTM",
        &["step", "lstm_w", "lstm_r", "lstm_b", "", "h0", "c0"],
        &["lstm_y", "h1", "c1"],
        &[attr_int("hidden_size", HIDDEN)],
    );
    node("Concat", &["h1", "c1"], &["stateN"], &[attr_int("axis", 0)]);
    // The decoder: ReLU, a 1 × 1 convolution, the sigmoid.
    node("Reshape", &["h1", "decoder_shape"], &["decoder_in"], &[]);
    node("Relu", &["decoder_in"], &["decoder_relu"], &[]);
    node(
        "Conv",
        &[
            "decoder_relu",
            "decoder.decoder.2.weight",
            "decoder.decoder.2.bias",
        ],
        &["decoder_conv"],
        &conv(1, 0, 1),
    );
    node("Sigmoid", &["decoder_conv"], &["probability"], &[]);
    node(
        "Reshape",
        &["probability", "output_shape"],
        &["output"],
        &[],
    );

    put_len_field(&mut g, GRAPH_NAME, b"silero_vad_8k_lean");
    let mut init = |name: &str, data_type: u64, dims: &[i64], raw: &[u8]| {
        put_len_field(
            &mut g,
            GRAPH_INITIALIZER,
            &tensor(name, data_type, dims, raw),
        );
    };
    let i64s = |v: &[i64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    init("pads", INT64, &[4], &i64s(&[0, 0, 0, STFT_PAD]));
    init("axis1", INT64, &[1], &i64s(&[1]));
    init("zero", INT64, &[1], &i64s(&[0]));
    init("bins", INT64, &[1], &i64s(&[STFT_BINS]));
    init("two_bins", INT64, &[1], &i64s(&[2 * STFT_BINS]));
    init("two", FLOAT, &[], &2.0f32.to_le_bytes());
    init("step_shape", INT64, &[3], &i64s(&[1, -1, HIDDEN]));
    init("decoder_shape", INT64, &[3], &i64s(&[-1, HIDDEN, 1]));
    init("output_shape", INT64, &[2], &i64s(&[-1, 1]));
    for (i, (name, dims)) in WEIGHTS.iter().enumerate() {
        if !name.starts_with("decoder.rnn.") {
            init(name, FLOAT, dims, w[i].raw);
        }
    }
    let row = HIDDEN as usize * 4;
    let raw = |name: &str| {
        let i = WEIGHTS.iter().position(|(n, _)| *n == name);
        // ok: the names are this module's own constants, all in WEIGHTS.
        w[i.expect("a name from WEIGHTS")].raw
    };
    let w_ih = onnx_gate_order(raw("decoder.rnn.weight_ih"), row);
    let w_hh = onnx_gate_order(raw("decoder.rnn.weight_hh"), row);
    let mut bias = onnx_gate_order(raw("decoder.rnn.bias_ih"), 4);
    bias.extend_from_slice(&onnx_gate_order(raw("decoder.rnn.bias_hh"), 4));
    init("lstm_w", FLOAT, &[1, 4 * HIDDEN, HIDDEN], &w_ih);
    init("lstm_r", FLOAT, &[1, 4 * HIDDEN, HIDDEN], &w_hh);
    init("lstm_b", FLOAT, &[1, 8 * HIDDEN], &bias);

    let batch = Dim::Param("batch");
    let window = 32 + 256;
    put_len_field(
        &mut g,
        GRAPH_INPUT,
        &value_info("input", FLOAT, &[batch, Dim::Value(window)]),
    );
    put_len_field(
        &mut g,
        GRAPH_INPUT,
        &value_info("state", FLOAT, &[Dim::Value(2), batch, Dim::Value(HIDDEN)]),
    );
    put_len_field(&mut g, GRAPH_INPUT, &value_info("sr", INT64, &[]));
    put_len_field(
        &mut g,
        GRAPH_OUTPUT,
        &value_info("output", FLOAT, &[batch, Dim::Value(1)]),
    );
    put_len_field(
        &mut g,
        GRAPH_OUTPUT,
        &value_info("stateN", FLOAT, &[Dim::Value(2), batch, Dim::Value(HIDDEN)]),
    );
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn gates_move_to_onnx_order() {
        // Four gates of 128 rows, one byte per row: i, f, g, o → i, o, f, g.
        let raw: Vec<u8> = (0..4u8).flat_map(|g| [g; 128]).collect();
        let out = onnx_gate_order(&raw, 1);
        let firsts: Vec<u8> = out.chunks(128).map(|c| c[0]).collect();
        assert_eq!(firsts, vec![0, 3, 1, 2]);
        assert_eq!(out.len(), raw.len());
    }

    #[test]
    fn not_a_silero_model_is_an_error_not_a_panic() {
        assert!(matches!(lean_silero_8k(b""), Err(Error::ModelFormat(_))));
        assert!(matches!(
            lean_silero_8k(&[0x3a, 0x05, 1, 2]),
            Err(Error::ModelFormat(_))
        ));
        // A graph with no `If`.
        let mut g = Vec::new();
        put_len_field(&mut g, GRAPH_NAME, b"empty");
        let mut m = Vec::new();
        put_len_field(&mut m, MODEL_GRAPH, &g);
        let err = lean_silero_8k(&m).unwrap_err().to_string();
        assert!(err.contains("not one `If`"), "{err}");
    }
}
