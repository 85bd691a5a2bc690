//! An optional edit of the Smart Turn graph: attention softmax in float.
//!
//! Smart Turn v3.2's CPU model is statically quantised: every attention layer computes
//! `Q·Kᵀ` to int8 (`QuantizeLinear` → `DequantizeLinear`), then `Softmax`, then int8 again.
//! ONNX Runtime fuses that `DequantizeLinear → Softmax → QuantizeLinear` into its
//! `QLinearSoftmax` kernel, a scalar lookup-table loop over 6 heads × 400 × 400 values a layer:
//! a quarter of a run's time (ONNX Runtime's profiler, docs/inference.md, *Float attention
//! softmax*). [`float_attention_softmax`] removes the int8 round trip *before* each such
//! softmax, so the scores stay in float (`Q·Kᵀ` becomes ONNX Runtime's `MatMulIntegerToFloat`)
//! and `Softmax` runs on its vectorised float kernel; the probabilities are quantised after it
//! as before. About a fifth less CPU per run; the verdicts are those of a slightly different
//! arithmetic (agreement with the published graph measured on the labelled sets), so it is an
//! option, off by default.
//!
//! Done at the protobuf wire level (`onnx_wire`): every other byte of the model stays
//! as published. Only the graph's node list and initializers are touched.

use std::collections::{HashMap, HashSet};

use crate::onnx_wire::{
    malformed, name_of, put_len_field, Fields, Node, GRAPH_INITIALIZER, GRAPH_NODE, GRAPH_OUTPUT,
    MODEL_GRAPH, NODE_INPUT, TENSOR_NAME, VALUE_INFO_NAME, WIRE_LEN,
};
use crate::Result;

/// The Smart Turn graph with every `QuantizeLinear → DequantizeLinear → Softmax` chain's
/// int8 round trip removed (the softmax reads the float scores), and the initializers only
/// those nodes used; with how many softmaxes were rewired.
pub fn float_attention_softmax(model: &[u8]) -> Result<(Vec<u8>, usize)> {
    let mut graph_field = None;
    for field in Fields::new(model) {
        let field = field?;
        if field.number == MODEL_GRAPH && field.wire == WIRE_LEN {
            if graph_field.is_some() {
                return Err(malformed("two graphs in the model"));
            }
            graph_field = Some(field);
        }
    }
    let graph = graph_field.ok_or_else(|| malformed("no graph in the model"))?;
    let (new_graph, rewired) = edit_graph(graph.payload)?;
    let mut out = Vec::with_capacity(model.len());
    for field in Fields::new(model) {
        let field = field?;
        if field.number == MODEL_GRAPH && field.wire == WIRE_LEN {
            put_len_field(&mut out, MODEL_GRAPH, &new_graph);
        } else {
            out.extend_from_slice(field.raw);
        }
    }
    Ok((out, rewired))
}

fn edit_graph(graph: &[u8]) -> Result<(Vec<u8>, usize)> {
    let mut nodes = Vec::new();
    let mut graph_outputs = HashSet::new();
    for field in Fields::new(graph) {
        let field = field?;
        if field.wire != WIRE_LEN {
            continue;
        }
        match field.number {
            GRAPH_NODE => nodes.push(Node::parse(field.payload)?),
            GRAPH_OUTPUT => {
                if let Some(name) = name_of(field.payload, VALUE_INFO_NAME)? {
                    graph_outputs.insert(name);
                }
            }
            _ => {}
        }
    }
    let mut producer: HashMap<&[u8], usize> = HashMap::new();
    let mut uses: HashMap<&[u8], usize> = HashMap::new();
    for (i, node) in nodes.iter().enumerate() {
        for out in &node.outputs {
            producer.insert(*out, i);
        }
        for input in &node.inputs {
            *uses.entry(*input).or_default() += 1;
        }
    }
    for name in &graph_outputs {
        *uses.entry(*name).or_default() += 1;
    }
    let used_once = |name: &[u8]| uses.get(name) == Some(&1);
    // Softmax node index → its new first input; the Q and DQ nodes that go.
    let mut rewire: HashMap<usize, &[u8]> = HashMap::new();
    let mut dropped: HashSet<usize> = HashSet::new();
    for (i, node) in nodes.iter().enumerate() {
        if !node.is("Softmax") {
            continue;
        }
        let Some(&scores) = node.inputs.first() else {
            continue;
        };
        let Some(&dq) = producer.get(scores) else {
            continue;
        };
        let dq_node = &nodes[dq];
        if !dq_node.is("DequantizeLinear") || !used_once(scores) {
            continue;
        }
        let Some(&quantised) = dq_node.inputs.first() else {
            continue;
        };
        let Some(&q) = producer.get(quantised) else {
            continue;
        };
        let q_node = &nodes[q];
        if !q_node.is("QuantizeLinear") || !used_once(quantised) {
            continue;
        }
        let Some(&float_scores) = q_node.inputs.first() else {
            continue;
        };
        rewire.insert(i, float_scores);
        dropped.insert(q);
        dropped.insert(dq);
    }
    // The scales and zero points only the dropped nodes read go with them (ONNX Runtime would
    // otherwise warn about each unused initializer at every start).
    let mut still_read: HashSet<&[u8]> = graph_outputs;
    for (i, node) in nodes.iter().enumerate() {
        if !dropped.contains(&i) {
            still_read.extend(node.inputs.iter().copied());
        }
    }
    let orphaned: HashSet<&[u8]> = dropped
        .iter()
        .flat_map(|&i| nodes[i].inputs.iter().copied())
        .filter(|name| !still_read.contains(name))
        .collect();

    let mut out = Vec::with_capacity(graph.len());
    let mut node_index = 0;
    for field in Fields::new(graph) {
        let field = field?;
        if field.wire == WIRE_LEN && field.number == GRAPH_NODE {
            let i = node_index;
            node_index += 1;
            if dropped.contains(&i) {
                continue;
            }
            if let Some(new_input) = rewire.get(&i) {
                put_len_field(
                    &mut out,
                    GRAPH_NODE,
                    &with_first_input(field.payload, new_input)?,
                );
                continue;
            }
        } else if field.wire == WIRE_LEN && field.number == GRAPH_INITIALIZER {
            if let Some(name) = name_of(field.payload, TENSOR_NAME)? {
                if orphaned.contains(name) {
                    continue;
                }
            }
        }
        out.extend_from_slice(field.raw);
    }
    Ok((out, rewire.len()))
}

/// The node's bytes with its first input replaced.
fn with_first_input(node: &[u8], input: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(node.len() + input.len());
    let mut replaced = false;
    for field in Fields::new(node) {
        let field = field?;
        if !replaced && field.wire == WIRE_LEN && field.number == NODE_INPUT {
            put_len_field(&mut out, NODE_INPUT, input);
            replaced = true;
        } else {
            out.extend_from_slice(field.raw);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx_wire::{put_varint, NODE_OP_TYPE, NODE_OUTPUT, WIRE_I32};
    use crate::Error;

    fn node(inputs: &[&str], outputs: &[&str], op: &str) -> Vec<u8> {
        let mut n = Vec::new();
        for i in inputs {
            put_len_field(&mut n, NODE_INPUT, i.as_bytes());
        }
        for o in outputs {
            put_len_field(&mut n, NODE_OUTPUT, o.as_bytes());
        }
        put_len_field(&mut n, 3, format!("node_{op}_{}", outputs[0]).as_bytes());
        put_len_field(&mut n, NODE_OP_TYPE, op.as_bytes());
        n
    }

    fn initializer(name: &str) -> Vec<u8> {
        let mut t = Vec::new();
        put_varint(&mut t, 1 << 3); // dims
        put_varint(&mut t, 1);
        put_len_field(&mut t, TENSOR_NAME, name.as_bytes());
        t
    }

    /// A model: producer, IR version (a varint field this code does not know), a graph
    /// `x → MatMul → Q → DQ → Softmax → Q → DQ → y`, with a name and an output.
    fn attention_model(extra_reader_of_dq: bool) -> Vec<u8> {
        let mut g = Vec::new();
        put_len_field(&mut g, GRAPH_NODE, &node(&["x", "w"], &["s"], "MatMul"));
        put_len_field(
            &mut g,
            GRAPH_NODE,
            &node(&["s", "sc", "zp"], &["sq"], "QuantizeLinear"),
        );
        put_len_field(
            &mut g,
            GRAPH_NODE,
            &node(&["sq", "sc", "zp"], &["sd"], "DequantizeLinear"),
        );
        if extra_reader_of_dq {
            put_len_field(&mut g, GRAPH_NODE, &node(&["sd"], &["other"], "Relu"));
        }
        put_len_field(&mut g, GRAPH_NODE, &node(&["sd"], &["p"], "Softmax"));
        put_len_field(
            &mut g,
            GRAPH_NODE,
            &node(&["p", "psc", "pzp"], &["pq"], "QuantizeLinear"),
        );
        put_len_field(
            &mut g,
            GRAPH_NODE,
            &node(&["pq", "psc", "pzp"], &["y"], "DequantizeLinear"),
        );
        put_len_field(&mut g, 2, b"graph-name");
        for name in ["w", "sc", "zp", "psc", "pzp"] {
            put_len_field(&mut g, GRAPH_INITIALIZER, &initializer(name));
        }
        let mut out = Vec::new();
        put_len_field(&mut out, VALUE_INFO_NAME, b"y");
        put_len_field(&mut g, GRAPH_OUTPUT, &out);
        let mut m = Vec::new();
        put_varint(&mut m, 1 << 3);
        put_varint(&mut m, 10);
        put_len_field(&mut m, 2, b"producer");
        put_len_field(&mut m, MODEL_GRAPH, &g);
        put_varint(&mut m, (8 << 3) | u64::from(WIRE_I32));
        m.extend_from_slice(&[1, 2, 3, 4]);
        m
    }

    fn graph_of(model: &[u8]) -> Vec<u8> {
        Fields::new(model)
            .map(Result::unwrap)
            .find(|f| f.number == MODEL_GRAPH)
            .unwrap()
            .payload
            .to_vec()
    }

    fn nodes_of(model: &[u8]) -> Vec<(String, Vec<String>)> {
        let g = graph_of(model);
        Fields::new(&g)
            .map(Result::unwrap)
            .filter(|f| f.number == GRAPH_NODE)
            .map(|f| {
                let n = Node::parse(f.payload).unwrap();
                (
                    String::from_utf8(n.op_type.to_vec()).unwrap(),
                    n.inputs
                        .iter()
                        .map(|i| String::from_utf8(i.to_vec()).unwrap())
                        .collect(),
                )
            })
            .collect()
    }

    fn initializers_of(model: &[u8]) -> Vec<String> {
        let g = graph_of(model);
        Fields::new(&g)
            .map(Result::unwrap)
            .filter(|f| f.number == GRAPH_INITIALIZER)
            .map(|f| {
                String::from_utf8(name_of(f.payload, TENSOR_NAME).unwrap().unwrap().to_vec())
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn the_round_trip_before_the_softmax_goes_and_nothing_else() {
        let model = attention_model(false);
        let (edited, rewired) = float_attention_softmax(&model).unwrap();
        assert_eq!(rewired, 1);
        let ops: Vec<(String, Vec<String>)> = nodes_of(&edited);
        let expect = |op: &str, inputs: &[&str]| {
            (
                op.to_string(),
                inputs.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            )
        };
        assert_eq!(
            ops,
            vec![
                expect("MatMul", &["x", "w"]),
                expect("Softmax", &["s"]),
                expect("QuantizeLinear", &["p", "psc", "pzp"]),
                expect("DequantizeLinear", &["pq", "psc", "pzp"]),
            ]
        );
        // The scale and zero point only the dropped pair read go; the rest stay in order.
        assert_eq!(initializers_of(&edited), vec!["w", "psc", "pzp"]);
        // The model's other fields, known or not, are byte for byte where they were.
        let model_fields: Vec<Vec<u8>> = Fields::new(&model)
            .map(Result::unwrap)
            .filter(|f| f.number != MODEL_GRAPH)
            .map(|f| f.raw.to_vec())
            .collect();
        let edited_fields: Vec<Vec<u8>> = Fields::new(&edited)
            .map(Result::unwrap)
            .filter(|f| f.number != MODEL_GRAPH)
            .map(|f| f.raw.to_vec())
            .collect();
        assert_eq!(model_fields, edited_fields);
        assert_eq!(model_fields.len(), 3);
        // Applying it again changes nothing.
        let (again, rewired) = float_attention_softmax(&edited).unwrap();
        assert_eq!(rewired, 0);
        assert_eq!(again, edited);
    }

    #[test]
    fn a_dequantised_value_read_elsewhere_is_left_alone() {
        let model = attention_model(true);
        let (edited, rewired) = float_attention_softmax(&model).unwrap();
        assert_eq!(rewired, 0);
        assert_eq!(edited, model);
    }

    #[test]
    fn malformed_bytes_are_an_error_not_a_panic() {
        let model = attention_model(false);
        for cut in 1..model.len() {
            // Every truncation either parses (a cut between fields) or is refused.
            let _ = float_attention_softmax(&model[..cut]);
        }
        assert!(matches!(
            float_attention_softmax(&[0x3b]),
            Err(Error::ModelFormat(_))
        ));
        assert!(matches!(
            float_attention_softmax(b""),
            Err(Error::ModelFormat(_))
        ));
        let mut long = vec![0xff; 11];
        long.push(0);
        assert!(matches!(
            float_attention_softmax(&long),
            Err(Error::ModelFormat(_))
        ));
    }
}
