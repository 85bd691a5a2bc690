//! Edits of the Smart Turn graph around its attention layers.
//!
//! Smart Turn v3.2's CPU model is statically quantised: every attention layer computes
//! `Q·Kᵀ` to uint8 (`QuantizeLinear` → `DequantizeLinear`), then `Softmax`, then uint8 again,
//! then `P·V` to uint8. ONNX Runtime fuses the `DequantizeLinear → Softmax → QuantizeLinear`
//! into its `QLinearSoftmax` kernel, a scalar lookup-table loop over 6 heads × 400 × 400 values
//! a layer (a quarter of a run's time, ONNX Runtime's profiler, docs/inference.md, *Float
//! attention softmax*), and each product of two activations into `QLinearMatMul`, which runs a
//! head at a time through memory (a fifth of a run). Three edits address them:
//!
//! - `own_softmax_kernel` ([`crate::TurnGraph::OwnSoftmaxKernel`], and part of the default)
//!   replaces each softmax chain with one node of ontime's operator (`softmax_op`), which
//!   computes the same bytes as ONNX Runtime's kernel several rows at a time.
//! - `own_attention_products` (with it, the default [`crate::TurnGraph::OwnAttentionKernels`])
//!   replaces each `DequantizeLinear ×2 → MatMul → QuantizeLinear` over two activations with one
//!   node of ontime's operator (`matmul_op`), which computes the same bytes as
//!   `QLinearMatMul` a register tile at a time. Products with a weight operand stay.
//!
//!   For both, nothing else in the graph changes, and the session checks the bytes against
//!   ONNX Runtime's kernels at load.
//! - [`float_attention_softmax`] removes the 8-bit round trip *before* each such softmax, so the
//!   scores stay in float (`Q·Kᵀ` becomes ONNX Runtime's `MatMulIntegerToFloat`) and `Softmax`
//!   runs on its vectorised float kernel; the probabilities are quantised after it as before.
//!   About a fifth less CPU per run; the verdicts are those of a slightly different arithmetic
//!   (agreement with the published graph measured on the labelled sets), so it is an option,
//!   off by default.
//!
//! Done at the protobuf wire level (`onnx_wire`): every other byte of the model stays
//! as published. Only the graph's node list and initializers (and, for the operators, the
//! model's opset imports) are touched.

use std::collections::{HashMap, HashSet};

use crate::attention_matmul::Requantisation;
use crate::attention_softmax::ShiftLog;
use crate::matmul_op::OP_TYPE as MATMUL_OP_TYPE;
use crate::onnx_wire::{
    attr_int, malformed, name_of, put_len_field, put_varint_field, read_varint, value_info, varint,
    Dim, Fields, Node, ATTR_I, ATTR_NAME, FLOAT, GRAPH_INITIALIZER, GRAPH_INPUT, GRAPH_NAME,
    GRAPH_NODE, GRAPH_OUTPUT, MODEL_GRAPH, MODEL_IR_VERSION, MODEL_OPSET_IMPORT, NODE_ATTRIBUTE,
    NODE_DOMAIN, NODE_INPUT, NODE_NAME, NODE_OP_TYPE, NODE_OUTPUT, OPSET_DOMAIN, OPSET_VERSION,
    TENSOR_DATA_TYPE, TENSOR_DIMS, TENSOR_FLOAT_DATA, TENSOR_INT32_DATA, TENSOR_NAME,
    TENSOR_RAW_DATA, UINT8, VALUE_INFO_NAME, WIRE_I32, WIRE_LEN, WIRE_VARINT,
};
use crate::softmax_op::{DOMAIN, OP_TYPE, SHIFT_LOG_ATTRIBUTE};
use crate::Result;

/// The Smart Turn graph with every `QuantizeLinear → DequantizeLinear → Softmax` chain's
/// int8 round trip removed (the softmax reads the float scores), and the initializers only
/// those nodes used; with how many softmaxes were rewired.
pub fn float_attention_softmax(model: &[u8]) -> Result<(Vec<u8>, usize)> {
    let graph = graph_of(model)?;
    let (new_graph, rewired) = float_edit(graph)?;
    Ok((with_graph(model, &new_graph, None)?, rewired))
}

/// The model's graph payload.
fn graph_of(model: &[u8]) -> Result<&[u8]> {
    let mut graph_field = None;
    for field in Fields::new(model) {
        let field = field?;
        if field.number == MODEL_GRAPH && field.wire == WIRE_LEN {
            if graph_field.is_some() {
                return Err(malformed("two graphs in the model"));
            }
            graph_field = Some(field.payload);
        }
    }
    graph_field.ok_or_else(|| malformed("no graph in the model"))
}

/// The model with its graph replaced (every other field as it was, in place), and an opset
/// import appended when the new graph uses another domain.
fn with_graph(model: &[u8], graph: &[u8], opset_import: Option<&[u8]>) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(model.len() + 64);
    for field in Fields::new(model) {
        let field = field?;
        if field.number == MODEL_GRAPH && field.wire == WIRE_LEN {
            put_len_field(&mut out, MODEL_GRAPH, graph);
        } else {
            out.extend_from_slice(field.raw);
        }
    }
    if let Some(import) = opset_import {
        put_len_field(&mut out, MODEL_OPSET_IMPORT, import);
    }
    Ok(out)
}

/// A graph's nodes, who produces each value, how often each is read (graph outputs count as
/// reads), and its initializers by name.
struct GraphIndex<'a> {
    nodes: Vec<Node<'a>>,
    /// Each node's encoded bytes, to copy it unchanged.
    node_bytes: Vec<&'a [u8]>,
    producer: HashMap<&'a [u8], usize>,
    uses: HashMap<&'a [u8], usize>,
    graph_outputs: HashSet<&'a [u8]>,
    initializers: HashMap<&'a [u8], &'a [u8]>,
}

impl<'a> GraphIndex<'a> {
    fn parse(graph: &'a [u8]) -> Result<Self> {
        let mut index = GraphIndex {
            nodes: Vec::new(),
            node_bytes: Vec::new(),
            producer: HashMap::new(),
            uses: HashMap::new(),
            graph_outputs: HashSet::new(),
            initializers: HashMap::new(),
        };
        for field in Fields::new(graph) {
            let field = field?;
            if field.wire != WIRE_LEN {
                continue;
            }
            match field.number {
                GRAPH_NODE => {
                    index.nodes.push(Node::parse(field.payload)?);
                    index.node_bytes.push(field.payload);
                }
                GRAPH_OUTPUT => {
                    if let Some(name) = name_of(field.payload, VALUE_INFO_NAME)? {
                        index.graph_outputs.insert(name);
                    }
                }
                GRAPH_INITIALIZER => {
                    if let Some(name) = name_of(field.payload, TENSOR_NAME)? {
                        index.initializers.insert(name, field.payload);
                    }
                }
                _ => {}
            }
        }
        for (i, node) in index.nodes.iter().enumerate() {
            for out in &node.outputs {
                index.producer.insert(*out, i);
            }
            for input in &node.inputs {
                *index.uses.entry(*input).or_default() += 1;
            }
        }
        for name in &index.graph_outputs {
            *index.uses.entry(*name).or_default() += 1;
        }
        Ok(index)
    }

    fn used_once(&self, name: &[u8]) -> bool {
        self.uses.get(name) == Some(&1)
    }

    /// The node producing `value` if it is a default-domain `op`.
    fn producer_is(&self, value: &[u8], op: &str) -> Option<usize> {
        self.producer
            .get(value)
            .copied()
            .filter(|&i| self.nodes[i].is(op))
    }

    /// The initializers only `dropped` nodes read, and no node that replaces them (ONNX
    /// Runtime would otherwise warn about each unused one at every start).
    fn orphaned_by(
        &self,
        dropped: &HashSet<usize>,
        replacements_read: &HashSet<&[u8]>,
    ) -> HashSet<&'a [u8]> {
        let mut still_read: HashSet<&[u8]> = self.graph_outputs.clone();
        still_read.extend(replacements_read.iter().copied());
        for (i, node) in self.nodes.iter().enumerate() {
            if !dropped.contains(&i) {
                still_read.extend(node.inputs.iter().copied());
            }
        }
        dropped
            .iter()
            .flat_map(|&i| self.nodes[i].inputs.iter().copied())
            .filter(|name| !still_read.contains(name))
            .collect()
    }
}

/// The graph's fields with nodes dropped or replaced (by node index) and orphaned
/// initializers left out; everything else copied as it was, in place.
fn rewrite(
    graph: &[u8],
    dropped: &HashSet<usize>,
    replaced: &HashMap<usize, Vec<u8>>,
    orphaned: &HashSet<&[u8]>,
) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(graph.len());
    let mut node_index = 0;
    for field in Fields::new(graph) {
        let field = field?;
        if field.wire == WIRE_LEN && field.number == GRAPH_NODE {
            let i = node_index;
            node_index += 1;
            if let Some(node) = replaced.get(&i) {
                put_len_field(&mut out, GRAPH_NODE, node);
                continue;
            }
            if dropped.contains(&i) {
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
    Ok(out)
}

fn float_edit(graph: &[u8]) -> Result<(Vec<u8>, usize)> {
    let index = GraphIndex::parse(graph)?;
    let mut replaced: HashMap<usize, Vec<u8>> = HashMap::new();
    let mut dropped: HashSet<usize> = HashSet::new();
    for (i, node) in index.nodes.iter().enumerate() {
        if !node.is("Softmax") {
            continue;
        }
        let Some(&scores) = node.inputs.first() else {
            continue;
        };
        let Some(dq) = index.producer_is(scores, "DequantizeLinear") else {
            continue;
        };
        if !index.used_once(scores) {
            continue;
        }
        let Some(&quantised) = index.nodes[dq].inputs.first() else {
            continue;
        };
        let Some(q) = index.producer_is(quantised, "QuantizeLinear") else {
            continue;
        };
        if !index.used_once(quantised) {
            continue;
        }
        let Some(&float_scores) = index.nodes[q].inputs.first() else {
            continue;
        };
        replaced.insert(i, with_first_input(index.node_bytes[i], float_scores)?);
        dropped.insert(q);
        dropped.insert(dq);
    }
    // The rewired softmaxes stay undropped: what they read is counted with every other node.
    let orphaned = index.orphaned_by(&dropped, &HashSet::new());
    Ok((
        rewrite(graph, &dropped, &replaced, &orphaned)?,
        replaced.len(),
    ))
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

/// The model's IR version and opset imports, encoded (a chain's reference model starts with
/// them), and whether they import ontime's operator domain already.
fn header_of(model: &[u8]) -> Result<(Vec<u8>, bool)> {
    let mut header = Vec::new();
    let mut imports_ours = false;
    for field in Fields::new(model) {
        let field = field?;
        if matches!(field.number, MODEL_IR_VERSION | MODEL_OPSET_IMPORT) {
            header.extend_from_slice(field.raw);
        }
        if field.number == MODEL_OPSET_IMPORT
            && field.wire == WIRE_LEN
            && name_of(field.payload, OPSET_DOMAIN)? == Some(DOMAIN.as_bytes())
        {
            imports_ours = true;
        }
    }
    Ok((header, imports_ours))
}

/// Chains replaced by nodes of ontime's operators: the nodes dropped, the new nodes by the
/// index they take, and the values the new nodes read.
#[derive(Default)]
struct Edit<'a> {
    dropped: HashSet<usize>,
    replaced: HashMap<usize, Vec<u8>>,
    replacements_read: HashSet<&'a [u8]>,
}

impl Edit<'_> {
    /// The model with the edit made: initializers nothing reads any more left out, and
    /// ontime's operator domain imported if a node now uses it and the model did not import
    /// it yet.
    fn apply(&self, model: &[u8], graph: &[u8], index: &GraphIndex) -> Result<Vec<u8>> {
        let orphaned = index.orphaned_by(&self.dropped, &self.replacements_read);
        let new_graph = rewrite(graph, &self.dropped, &self.replaced, &orphaned)?;
        let mut import = Vec::new();
        put_len_field(&mut import, OPSET_DOMAIN, DOMAIN.as_bytes());
        put_varint_field(&mut import, OPSET_VERSION, 1);
        let needs_import = !self.replaced.is_empty() && !header_of(model)?.1;
        with_graph(model, &new_graph, needs_import.then_some(&import[..]))
    }
}

/// One `DequantizeLinear → Softmax → QuantizeLinear` chain that [`own_softmax_kernel`]
/// replaced: its constants, and what [`QuantisedSoftmax::reference_model`] needs to run the
/// chain alone on ONNX Runtime's own kernel.
#[derive(Debug, Clone)]
pub(crate) struct QuantisedSoftmax {
    pub(crate) x_scale: f32,
    pub(crate) y_scale: f32,
    pub(crate) y_zero_point: u8,
    /// The three nodes and four initializers, encoded, as the model has them.
    nodes: [Vec<u8>; 3],
    initializers: Vec<Vec<u8>>,
    input: Vec<u8>,
    output: Vec<u8>,
    /// The model's IR version and opset imports, encoded.
    header: Vec<u8>,
}

impl QuantisedSoftmax {
    /// A model of this chain alone: uint8 `[rows, d]` in, uint8 `[rows, d]` out, the nodes and
    /// constants exactly as in the model, so ONNX Runtime fuses it into the same kernel with
    /// the same table.
    pub(crate) fn reference_model(&self, d: usize) -> Vec<u8> {
        let mut g = Vec::new();
        for node in &self.nodes {
            put_len_field(&mut g, GRAPH_NODE, node);
        }
        put_len_field(&mut g, GRAPH_NAME, b"quantised_softmax");
        for init in &self.initializers {
            put_len_field(&mut g, GRAPH_INITIALIZER, init);
        }
        let dims = [Dim::Param("rows"), Dim::Value(d as i64)];
        let input = String::from_utf8_lossy(&self.input);
        let output = String::from_utf8_lossy(&self.output);
        put_len_field(&mut g, GRAPH_INPUT, &value_info(&input, UINT8, &dims));
        put_len_field(&mut g, GRAPH_OUTPUT, &value_info(&output, UINT8, &dims));
        let mut m = self.header.clone();
        put_len_field(&mut m, MODEL_GRAPH, &g);
        m
    }
}

/// The model with every quantised softmax chain over the last axis with uint8 scalar
/// constants (what ONNX Runtime fuses into uint8 `QLinearSoftmax`) replaced by one
/// [`crate::softmax_op`] node that evaluates the table's shift as `shift_log` says; with the
/// chains replaced, in graph order.
pub(crate) fn own_softmax_kernel(
    model: &[u8],
    shift_log: ShiftLog,
) -> Result<(Vec<u8>, Vec<QuantisedSoftmax>)> {
    let graph = graph_of(model)?;
    let (header, _) = header_of(model)?;
    let index = GraphIndex::parse(graph)?;
    let mut edit = Edit::default();
    let mut chains = Vec::new();
    for (i, node) in index.nodes.iter().enumerate() {
        if !node.is("Softmax") || !last_axis(node)? {
            continue;
        }
        let (Some(&scores), Some(&probabilities)) = (node.inputs.first(), node.outputs.first())
        else {
            continue;
        };
        let Some(dq) = index.producer_is(scores, "DequantizeLinear") else {
            continue;
        };
        // The softmax's only reader is a QuantizeLinear (its first input).
        let readers: Vec<usize> = (0..index.nodes.len())
            .filter(|&j| index.nodes[j].inputs.contains(&probabilities))
            .collect();
        let [q] = readers[..] else {
            continue;
        };
        if !index.nodes[q].is("QuantizeLinear")
            || !index.used_once(scores)
            || !index.used_once(probabilities)
            || index.nodes[q].inputs.first() != Some(&probabilities)
        {
            continue;
        }
        let (dq_node, q_node) = (&index.nodes[dq], &index.nodes[q]);
        let ([x, x_scale, x_zp], [_, y_scale, y_zp], [y]) =
            (&dq_node.inputs[..], &q_node.inputs[..], &q_node.outputs[..])
        else {
            continue;
        };
        let constant = |name: &[u8]| index.initializers.get(name).copied();
        let (Some(xs), Some(xz), Some(ys), Some(yz)) = (
            constant(x_scale),
            constant(x_zp),
            constant(y_scale),
            constant(y_zp),
        ) else {
            continue;
        };
        let (Some(x_scale_value), Some(_), Some(y_scale_value), Some(y_zero_point)) = (
            scalar_f32(xs)?,
            scalar_u8(xz)?,
            scalar_f32(ys)?,
            scalar_u8(yz)?,
        ) else {
            continue;
        };
        let mut n = Vec::new();
        for input in [*x, *x_scale, *y_scale, *y_zp] {
            put_len_field(&mut n, NODE_INPUT, input);
            edit.replacements_read.insert(input);
        }
        put_len_field(&mut n, NODE_OUTPUT, y);
        let mut name = y.to_vec();
        name.extend_from_slice(b"_rows");
        put_len_field(&mut n, NODE_NAME, &name);
        put_len_field(&mut n, NODE_OP_TYPE, OP_TYPE.as_bytes());
        put_len_field(&mut n, NODE_DOMAIN, DOMAIN.as_bytes());
        put_len_field(
            &mut n,
            NODE_ATTRIBUTE,
            &attr_int(SHIFT_LOG_ATTRIBUTE, shift_log.attribute()),
        );
        // In the DequantizeLinear's place: its inputs exist there, and every reader of the
        // QuantizeLinear's output comes after it.
        edit.replaced.insert(dq, n);
        edit.dropped.extend([dq, i, q]);
        chains.push(QuantisedSoftmax {
            x_scale: x_scale_value,
            y_scale: y_scale_value,
            y_zero_point,
            nodes: [
                index.node_bytes[dq].to_vec(),
                index.node_bytes[i].to_vec(),
                index.node_bytes[q].to_vec(),
            ],
            initializers: [xs, xz, ys, yz].map(<[u8]>::to_vec).to_vec(),
            input: x.to_vec(),
            output: y.to_vec(),
            header: header.clone(),
        });
    }
    Ok((edit.apply(model, graph, &index)?, chains))
}

/// One `DequantizeLinear ×2 → MatMul → QuantizeLinear` chain over two activations that
/// [`own_attention_products`] replaced: its constants, and what
/// [`QuantisedProduct::reference_model`] needs to run the chain alone on ONNX Runtime's kernel.
#[derive(Debug, Clone)]
pub(crate) struct QuantisedProduct {
    /// The chain's scales and zero points, as the kernel takes them.
    pub(crate) requantisation: Requantisation,
    /// The four nodes (two `DequantizeLinear`, `MatMul`, `QuantizeLinear`) and the scales'
    /// and zero points' initializers, encoded, as the model has them.
    nodes: [Vec<u8>; 4],
    initializers: Vec<Vec<u8>>,
    inputs: [Vec<u8>; 2],
    output: Vec<u8>,
    /// The model's IR version and opset imports, encoded.
    header: Vec<u8>,
}

impl QuantisedProduct {
    /// A model of this chain alone: uint8 `A` `[batch, m, k]` and `B` `[batch, k, n]` in
    /// (every dimension symbolic), uint8 out, the nodes and constants exactly as in the model,
    /// so ONNX Runtime fuses it into the same `QLinearMatMul` with the same scales.
    pub(crate) fn reference_model(&self) -> Vec<u8> {
        let mut g = Vec::new();
        for node in &self.nodes {
            put_len_field(&mut g, GRAPH_NODE, node);
        }
        put_len_field(&mut g, GRAPH_NAME, b"quantised_product");
        for init in &self.initializers {
            put_len_field(&mut g, GRAPH_INITIALIZER, init);
        }
        let (batch, m, k, n) = (
            Dim::Param("batch"),
            Dim::Param("m"),
            Dim::Param("k"),
            Dim::Param("n"),
        );
        let name = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        put_len_field(
            &mut g,
            GRAPH_INPUT,
            &value_info(&name(&self.inputs[0]), UINT8, &[batch, m, k]),
        );
        put_len_field(
            &mut g,
            GRAPH_INPUT,
            &value_info(&name(&self.inputs[1]), UINT8, &[batch, k, n]),
        );
        put_len_field(
            &mut g,
            GRAPH_OUTPUT,
            &value_info(&name(&self.output), UINT8, &[batch, m, n]),
        );
        let mut model = self.header.clone();
        put_len_field(&mut model, MODEL_GRAPH, &g);
        model
    }
}

/// The model with every quantised `MatMul` of two activations (both operands from
/// `DequantizeLinear` of a computed value, uint8 scalar scales and zero points, the product read
/// only by a `QuantizeLinear`: what ONNX Runtime fuses into `QLinearMatMul`) replaced by one
/// [`crate::matmul_op`] node; with the chains replaced, in graph order. Products with a
/// constant operand (the weights) stay on ONNX Runtime's kernel, which packs them once.
pub(crate) fn own_attention_products(model: &[u8]) -> Result<(Vec<u8>, Vec<QuantisedProduct>)> {
    let graph = graph_of(model)?;
    let (header, _) = header_of(model)?;
    let index = GraphIndex::parse(graph)?;
    let constant = |name: &[u8]| index.initializers.get(name).copied();
    let mut edit = Edit::default();
    let mut chains = Vec::new();
    for (i, node) in index.nodes.iter().enumerate() {
        if !node.is("MatMul") {
            continue;
        }
        let ([left, right], [product]) = (&node.inputs[..], &node.outputs[..]) else {
            continue;
        };
        let (Some(dq_a), Some(dq_b)) = (
            index.producer_is(left, "DequantizeLinear"),
            index.producer_is(right, "DequantizeLinear"),
        ) else {
            continue;
        };
        let readers: Vec<usize> = (0..index.nodes.len())
            .filter(|&j| index.nodes[j].inputs.contains(product))
            .collect();
        let [q] = readers[..] else {
            continue;
        };
        if dq_a == dq_b
            || !index.nodes[q].is("QuantizeLinear")
            || !index.used_once(left)
            || !index.used_once(right)
            || !index.used_once(product)
            || index.nodes[q].inputs.first() != Some(product)
        {
            continue;
        }
        let (a_node, b_node, q_node) = (&index.nodes[dq_a], &index.nodes[dq_b], &index.nodes[q]);
        let ([a, a_scale, a_zp], [b, b_scale, b_zp], [_, y_scale, y_zp], [y]) = (
            &a_node.inputs[..],
            &b_node.inputs[..],
            &q_node.inputs[..],
            &q_node.outputs[..],
        ) else {
            continue;
        };
        // Both operands computed: a constant one is a weight matrix.
        if constant(a).is_some() || constant(b).is_some() {
            continue;
        }
        let scales = [*a_scale, *b_scale, *y_scale];
        let zero_points = [*a_zp, *b_zp, *y_zp];
        let mut scale_values = [0f32; 3];
        let mut zero_values = [0u8; 3];
        let mut all_scalars = true;
        for (name, value) in scales.iter().zip(&mut scale_values) {
            match constant(name).map(scalar_f32).transpose()?.flatten() {
                Some(v) => *value = v,
                None => all_scalars = false,
            }
        }
        for (name, value) in zero_points.iter().zip(&mut zero_values) {
            match constant(name).map(scalar_u8).transpose()?.flatten() {
                Some(v) => *value = v,
                None => all_scalars = false,
            }
        }
        if !all_scalars {
            continue;
        }
        let mut n = Vec::new();
        for input in [*a, *a_scale, *a_zp, *b, *b_scale, *b_zp, *y_scale, *y_zp] {
            put_len_field(&mut n, NODE_INPUT, input);
            edit.replacements_read.insert(input);
        }
        put_len_field(&mut n, NODE_OUTPUT, y);
        let mut name = y.to_vec();
        name.extend_from_slice(b"_tiles");
        put_len_field(&mut n, NODE_NAME, &name);
        put_len_field(&mut n, NODE_OP_TYPE, MATMUL_OP_TYPE.as_bytes());
        put_len_field(&mut n, NODE_DOMAIN, DOMAIN.as_bytes());
        // In the MatMul's place: both operands exist there, and every reader of the
        // QuantizeLinear's output comes after it.
        edit.replaced.insert(i, n);
        edit.dropped.extend([dq_a, dq_b, i, q]);
        let mut initializers: Vec<Vec<u8>> = Vec::new();
        let mut seen: HashSet<&[u8]> = HashSet::new();
        for name in scales.into_iter().chain(zero_points) {
            if seen.insert(name) {
                if let Some(t) = constant(name) {
                    initializers.push(t.to_vec());
                }
            }
        }
        chains.push(QuantisedProduct {
            requantisation: Requantisation::new(
                scale_values[0],
                zero_values[0],
                scale_values[1],
                zero_values[1],
                scale_values[2],
                zero_values[2],
            ),
            nodes: [dq_a, dq_b, i, q].map(|j| index.node_bytes[j].to_vec()),
            initializers,
            inputs: [a.to_vec(), b.to_vec()],
            output: y.to_vec(),
            header: header.clone(),
        });
    }
    Ok((edit.apply(model, graph, &index)?, chains))
}

/// Whether a Softmax node reduces over the last axis (its `axis` is −1). A missing `axis` is
/// left alone: its meaning depends on the opset (1 before opset 13).
fn last_axis(node: &Node) -> Result<bool> {
    for attribute in &node.attributes {
        let mut name = None;
        let mut value = None;
        for field in Fields::new(attribute) {
            let field = field?;
            match (field.number, field.wire) {
                (ATTR_NAME, WIRE_LEN) => name = Some(field.payload),
                (ATTR_I, WIRE_VARINT) => value = Some(varint(field.payload)? as i64),
                _ => {}
            }
        }
        if name == Some(b"axis".as_slice()) {
            return Ok(value == Some(-1));
        }
    }
    Ok(false)
}

/// A scalar initializer's value: its element type and the one value's bits, if it has no
/// dimension or one of size 1. The value may be in `raw_data` (little-endian bytes), in
/// `float_data` (fixed32, packed or not) or in `int32_data` (varints, packed or not; where
/// ONNX keeps uint8 values outside `raw_data`).
fn scalar_value(tensor: &[u8]) -> Result<Option<(u64, u32)>> {
    let mut data_type = None;
    let mut values: Vec<u32> = Vec::new();
    let mut elements: u64 = 1;
    for field in Fields::new(tensor) {
        let field = field?;
        match (field.number, field.wire) {
            (TENSOR_DATA_TYPE, WIRE_VARINT) => data_type = Some(varint(field.payload)?),
            (TENSOR_DIMS, WIRE_VARINT) => {
                elements = elements.saturating_mul(varint(field.payload)?)
            }
            (TENSOR_RAW_DATA, WIRE_LEN) => match *field.payload {
                [v] => values.push(u32::from(v)),
                [a, b, c, d] => values.push(u32::from_le_bytes([a, b, c, d])),
                _ => return Ok(None),
            },
            (TENSOR_FLOAT_DATA, WIRE_I32 | WIRE_LEN) => {
                for bytes in field.payload.chunks(4) {
                    let &[a, b, c, d] = bytes else {
                        return Ok(None);
                    };
                    values.push(u32::from_le_bytes([a, b, c, d]));
                }
            }
            (TENSOR_INT32_DATA, WIRE_VARINT) => values.push(varint(field.payload)? as u32),
            (TENSOR_INT32_DATA, WIRE_LEN) => {
                let mut at = 0;
                while at < field.payload.len() {
                    values.push(read_varint(field.payload, &mut at)? as u32);
                }
            }
            _ => {}
        }
    }
    Ok(match (data_type, &values[..]) {
        (Some(t), &[v]) if elements == 1 => Some((t, v)),
        _ => None,
    })
}

/// A scalar f32 initializer's value.
fn scalar_f32(tensor: &[u8]) -> Result<Option<f32>> {
    Ok(match scalar_value(tensor)? {
        Some((FLOAT, bits)) => Some(f32::from_bits(bits)),
        _ => None,
    })
}

/// A scalar uint8 initializer's value.
fn scalar_u8(tensor: &[u8]) -> Result<Option<u8>> {
    Ok(match scalar_value(tensor)? {
        Some((UINT8, v)) => u8::try_from(v).ok(),
        _ => None,
    })
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
        model_with(extra_reader_of_dq, None, None)
    }

    /// [`attention_model`] with the softmax's `axis` attribute, and the constants as scalars
    /// (the second QuantizeLinear's zero point as given) rather than empty initializers.
    fn model_with(
        extra_reader_of_dq: bool,
        axis: Option<i64>,
        y_zero_point: Option<Scalar>,
    ) -> Vec<u8> {
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
        let mut softmax = node(&["sd"], &["p"], "Softmax");
        if let Some(axis) = axis {
            put_len_field(&mut softmax, NODE_ATTRIBUTE, &attr_int("axis", axis));
        }
        put_len_field(&mut g, GRAPH_NODE, &softmax);
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
        put_len_field(&mut g, GRAPH_INITIALIZER, &initializer("w"));
        match y_zero_point {
            None => {
                for name in ["sc", "zp", "psc", "pzp"] {
                    put_len_field(&mut g, GRAPH_INITIALIZER, &initializer(name));
                }
            }
            Some(y_zero_point) => {
                for (name, value) in [
                    ("sc", Scalar::F32(0.208)),
                    ("zp", Scalar::U8(114)),
                    ("psc", Scalar::F32(0.003_875)),
                    ("pzp", y_zero_point),
                ] {
                    put_len_field(&mut g, GRAPH_INITIALIZER, &scalar(name, value));
                }
            }
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

    /// A node as [`nodes_of`] lists it.
    fn expect(op: &str, inputs: &[&str]) -> (String, Vec<String>) {
        (
            op.to_string(),
            inputs.iter().map(|s| s.to_string()).collect(),
        )
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

    /// A scalar initializer: f32 in `float_data` or uint8 in `int32_data`, as the exporter
    /// writes them.
    fn scalar(name: &str, value: Scalar) -> Vec<u8> {
        let mut t = Vec::new();
        match value {
            Scalar::F32(v) => {
                put_varint_field(&mut t, TENSOR_DATA_TYPE, FLOAT);
                put_len_field(&mut t, TENSOR_FLOAT_DATA, &v.to_le_bytes());
            }
            Scalar::U8(v) => {
                put_varint_field(&mut t, TENSOR_DATA_TYPE, UINT8);
                let mut packed = Vec::new();
                put_varint(&mut packed, u64::from(v));
                put_len_field(&mut t, TENSOR_INT32_DATA, &packed);
            }
        }
        put_len_field(&mut t, TENSOR_NAME, name.as_bytes());
        t
    }

    #[derive(Clone, Copy)]
    enum Scalar {
        F32(f32),
        U8(u8),
    }

    /// The model our kernel's edit applies to: constants as scalars, softmax over the last
    /// axis, uint8 zero points.
    fn quantised_attention(axis: i64, y_zero_point: Scalar) -> Vec<u8> {
        model_with(false, Some(axis), Some(y_zero_point))
    }

    #[test]
    fn the_softmax_chain_becomes_one_node_of_our_operator() {
        let model = quantised_attention(-1, Scalar::U8(0));
        let (edited, chains) = own_softmax_kernel(&model, ShiftLog::Single).unwrap();
        assert_eq!(chains.len(), 1);
        assert_eq!(chains[0].x_scale, 0.208);
        assert_eq!(chains[0].y_scale, 0.003_875);
        assert_eq!(chains[0].y_zero_point, 0);
        assert_eq!(
            nodes_of(&edited),
            vec![
                expect("MatMul", &["x", "w"]),
                expect("QuantizeLinear", &["s", "sc", "zp"]),
                expect(OP_TYPE, &["sq", "sc", "psc", "pzp"]),
                expect("DequantizeLinear", &["pq", "psc", "pzp"]),
            ]
        );
        // The operator's node writes the QuantizeLinear's output, in ontime's domain, with the
        // shift attribute; every initializer is still read by some node.
        let g = graph_of(&edited);
        let ours = Fields::new(&g)
            .map(Result::unwrap)
            .filter(|f| f.number == GRAPH_NODE)
            .map(|f| Node::parse(f.payload).unwrap())
            .find(|n| n.op_type == OP_TYPE.as_bytes())
            .unwrap();
        assert_eq!(ours.outputs, vec![b"pq".as_slice()]);
        assert_eq!(ours.domain, DOMAIN.as_bytes());
        assert_eq!(
            ours.attributes,
            vec![attr_int(SHIFT_LOG_ATTRIBUTE, ShiftLog::Single.attribute()).as_slice()]
        );
        assert_eq!(
            initializers_of(&edited),
            vec!["w", "sc", "zp", "psc", "pzp"]
        );
        // The model gains one opset import, for ontime's domain, after its other fields.
        let imports: Vec<Vec<u8>> = Fields::new(&edited)
            .map(Result::unwrap)
            .filter(|f| f.number == MODEL_OPSET_IMPORT && f.wire == WIRE_LEN)
            .map(|f| f.payload.to_vec())
            .collect();
        assert_eq!(imports.len(), 1);
        assert_eq!(
            name_of(&imports[0], OPSET_DOMAIN).unwrap(),
            Some(DOMAIN.as_bytes())
        );
        // The chain alone, for the load check: its three nodes, four constants, uint8 in and out.
        let reference = chains[0].reference_model(400);
        assert_eq!(
            nodes_of(&reference),
            vec![
                expect("DequantizeLinear", &["sq", "sc", "zp"]),
                expect("Softmax", &["sd"]),
                expect("QuantizeLinear", &["p", "psc", "pzp"]),
            ]
        );
        assert_eq!(initializers_of(&reference), vec!["sc", "zp", "psc", "pzp"]);
    }

    #[test]
    fn chains_our_kernel_does_not_reproduce_are_left_alone() {
        // Softmax over another axis than the last, or a zero point that is not a uint8 scalar.
        for model in [
            quantised_attention(1, Scalar::U8(0)),
            quantised_attention(-1, Scalar::F32(0.0)),
        ] {
            let (edited, chains) = own_softmax_kernel(&model, ShiftLog::Double).unwrap();
            assert_eq!(chains.len(), 0);
            assert_eq!(edited, model);
        }
    }

    #[test]
    fn own_kernel_edit_of_malformed_bytes_is_an_error_not_a_panic() {
        let model = quantised_attention(-1, Scalar::U8(0));
        let accepted: Vec<usize> = (1..model.len())
            .filter(|&cut| own_softmax_kernel(&model[..cut], ShiftLog::Double).is_ok())
            .collect();
        // Only the cut between the graph and the model's last field leaves a whole model.
        assert_eq!(accepted, vec![model.len() - 5]);
        assert!(matches!(
            own_softmax_kernel(b"", ShiftLog::Double),
            Err(Error::ModelFormat(_))
        ));
    }

    /// `Q·Kᵀ` as the exporter writes it (two computed operands, each quantised and dequantised,
    /// the product quantised), its output dequantised under other constants into a weight
    /// product (a constant operand), and, if `shared`, the first operand's dequantised value
    /// read by another node too.
    fn products_model(shared: bool) -> Vec<u8> {
        let mut g = Vec::new();
        let mut add = |inputs: &[&str], outputs: &[&str], op: &str| {
            put_len_field(&mut g, GRAPH_NODE, &node(inputs, outputs, op));
        };
        add(&["qf", "qs", "qz"], &["qq"], "QuantizeLinear");
        add(&["kf", "ks", "kz"], &["kq"], "QuantizeLinear");
        add(&["qq", "qs", "qz"], &["qd"], "DequantizeLinear");
        add(&["kq", "ks", "kz"], &["kd"], "DequantizeLinear");
        if shared {
            add(&["qd"], &["other"], "Relu");
        }
        add(&["qd", "kd"], &["s"], "MatMul");
        add(&["s", "ss", "sz"], &["sq"], "QuantizeLinear");
        add(&["sq", "ts", "tz"], &["sd"], "DequantizeLinear");
        add(&["w", "ws", "wz"], &["wd"], "DequantizeLinear");
        add(&["sd", "wd"], &["z"], "MatMul");
        add(&["z", "ts", "tz"], &["y"], "QuantizeLinear");
        put_len_field(&mut g, 2, b"graph-name");
        for (name, value) in [
            ("qs", Scalar::F32(0.024)),
            ("qz", Scalar::U8(141)),
            ("ks", Scalar::F32(0.022)),
            ("kz", Scalar::U8(130)),
            ("ss", Scalar::F32(0.208)),
            ("sz", Scalar::U8(114)),
            ("ts", Scalar::F32(0.05)),
            ("tz", Scalar::U8(128)),
            ("ws", Scalar::F32(0.01)),
            ("wz", Scalar::U8(0)),
        ] {
            put_len_field(&mut g, GRAPH_INITIALIZER, &scalar(name, value));
        }
        put_len_field(&mut g, GRAPH_INITIALIZER, &initializer("w"));
        let mut out = Vec::new();
        put_len_field(&mut out, VALUE_INFO_NAME, b"y");
        put_len_field(&mut g, GRAPH_OUTPUT, &out);
        let mut m = Vec::new();
        put_varint(&mut m, 1 << 3);
        put_varint(&mut m, 10);
        put_len_field(&mut m, MODEL_GRAPH, &g);
        m
    }

    #[test]
    fn a_product_of_two_activations_becomes_one_node_and_weights_stay() {
        let (edited, chains) = own_attention_products(&products_model(false)).unwrap();
        assert_eq!(chains.len(), 1);
        assert_eq!(
            chains[0].requantisation,
            Requantisation::new(0.024, 141, 0.022, 130, 0.208, 114)
        );
        assert_eq!(
            nodes_of(&edited),
            vec![
                expect("QuantizeLinear", &["qf", "qs", "qz"]),
                expect("QuantizeLinear", &["kf", "ks", "kz"]),
                expect(
                    MATMUL_OP_TYPE,
                    &["qq", "qs", "qz", "kq", "ks", "kz", "ss", "sz"]
                ),
                expect("DequantizeLinear", &["sq", "ts", "tz"]),
                expect("DequantizeLinear", &["w", "ws", "wz"]),
                expect("MatMul", &["sd", "wd"]),
                expect("QuantizeLinear", &["z", "ts", "tz"]),
            ]
        );
        // `ss` and `sz` were read only by the dropped QuantizeLinear: the new node reads them,
        // so they stay.
        assert_eq!(
            initializers_of(&edited),
            vec!["qs", "qz", "ks", "kz", "ss", "sz", "ts", "tz", "ws", "wz", "w"]
        );
        let imports = Fields::new(&edited)
            .map(Result::unwrap)
            .filter(|f| f.number == MODEL_OPSET_IMPORT)
            .count();
        assert_eq!(imports, 1);
        // Edited again (as after the softmax edit): no second import.
        let (twice, again) = own_attention_products(&edited).unwrap();
        assert_eq!(again.len(), 0);
        assert_eq!(twice, edited);
        // The chain alone, for the load check: its four nodes and six constants.
        let reference = chains[0].reference_model();
        assert_eq!(
            nodes_of(&reference),
            vec![
                expect("DequantizeLinear", &["qq", "qs", "qz"]),
                expect("DequantizeLinear", &["kq", "ks", "kz"]),
                expect("MatMul", &["qd", "kd"]),
                expect("QuantizeLinear", &["s", "ss", "sz"]),
            ]
        );
        assert_eq!(
            initializers_of(&reference),
            vec!["qs", "ks", "ss", "qz", "kz", "sz"]
        );
    }

    #[test]
    fn products_edit_of_malformed_bytes_is_an_error_not_a_panic() {
        let model = products_model(false);
        let accepted: Vec<usize> = (1..model.len())
            .filter(|&cut| own_attention_products(&model[..cut]).is_ok())
            .collect();
        // The model's one field after its IR version is the graph: only the whole model parses.
        assert_eq!(accepted, Vec::<usize>::new());
        assert!(matches!(
            own_attention_products(b""),
            Err(Error::ModelFormat(_))
        ));
    }

    #[test]
    fn an_operand_read_elsewhere_is_left_alone() {
        let model = products_model(true);
        let (edited, chains) = own_attention_products(&model).unwrap();
        assert_eq!(chains.len(), 0);
        assert_eq!(edited, model);
    }
}
