//! The protobuf wire format, as much of it as the model edits need ([`crate::turn_graph`],
//! [`crate::vad_graph`]).
//!
//! Written by hand: the edits must keep every field of the model they do not touch byte for
//! byte (unknown ones included), which the Rust protobuf crates either drop on re-encoding
//! (`prost`) or reach only through code generated from the whole ONNX schema.

use crate::{Error, Result};

/// `ModelProto.graph`.
pub(crate) const MODEL_GRAPH: u32 = 7;
/// `GraphProto.node`, `.initializer`, `.output`.
pub(crate) const GRAPH_NODE: u32 = 1;
pub(crate) const GRAPH_INITIALIZER: u32 = 5;
pub(crate) const GRAPH_OUTPUT: u32 = 12;
/// `NodeProto.input`, `.output`, `.op_type`, `.domain`.
pub(crate) const NODE_INPUT: u32 = 1;
pub(crate) const NODE_OUTPUT: u32 = 2;
pub(crate) const NODE_OP_TYPE: u32 = 4;
pub(crate) const NODE_DOMAIN: u32 = 7;
/// `NodeProto.attribute`.
pub(crate) const NODE_ATTRIBUTE: u32 = 5;
/// `TensorProto.name` and `ValueInfoProto.name`.
pub(crate) const TENSOR_NAME: u32 = 8;
pub(crate) const VALUE_INFO_NAME: u32 = 1;

/// `ModelProto.ir_version`, `.opset_import`.
pub(crate) const MODEL_IR_VERSION: u32 = 1;
pub(crate) const MODEL_OPSET_IMPORT: u32 = 8;
/// `GraphProto.name`, `.input`.
pub(crate) const GRAPH_NAME: u32 = 2;
pub(crate) const GRAPH_INPUT: u32 = 11;
/// `NodeProto.name`.
pub(crate) const NODE_NAME: u32 = 3;
/// `AttributeProto.name`, `.i`, `.s`, `.t`, `.g`, `.ints`, `.type`.
pub(crate) const ATTR_NAME: u32 = 1;
pub(crate) const ATTR_I: u32 = 3;
pub(crate) const ATTR_S: u32 = 4;
pub(crate) const ATTR_T: u32 = 5;
pub(crate) const ATTR_G: u32 = 6;
pub(crate) const ATTR_INTS: u32 = 8;
pub(crate) const ATTR_TYPE: u32 = 20;
/// `AttributeProto.AttributeType`: INT, STRING, INTS.
pub(crate) const ATTR_TYPE_INT: u64 = 2;
pub(crate) const ATTR_TYPE_STRING: u64 = 3;
pub(crate) const ATTR_TYPE_INTS: u64 = 7;
/// `TensorProto.dims`, `.data_type`, `.float_data`, `.int32_data`, `.int64_data`, `.raw_data`.
pub(crate) const TENSOR_DIMS: u32 = 1;
pub(crate) const TENSOR_DATA_TYPE: u32 = 2;
pub(crate) const TENSOR_FLOAT_DATA: u32 = 4;
pub(crate) const TENSOR_INT32_DATA: u32 = 5;
pub(crate) const TENSOR_INT64_DATA: u32 = 7;
pub(crate) const TENSOR_RAW_DATA: u32 = 9;
/// `TensorProto.DataType`: FLOAT, UINT8, INT64.
pub(crate) const FLOAT: u64 = 1;
pub(crate) const UINT8: u64 = 2;
pub(crate) const INT64: u64 = 7;
/// `OperatorSetIdProto.domain`, `.version`.
pub(crate) const OPSET_DOMAIN: u32 = 1;
pub(crate) const OPSET_VERSION: u32 = 2;
/// `ValueInfoProto.type`; `TypeProto.tensor_type`; `TypeProto.Tensor.elem_type`,
/// `.shape`; `TensorShapeProto.dim`; `Dimension.dim_value`, `.dim_param`.
pub(crate) const VALUE_INFO_TYPE: u32 = 2;
pub(crate) const TYPE_TENSOR: u32 = 1;
pub(crate) const TENSOR_TYPE_ELEM: u32 = 1;
pub(crate) const TENSOR_TYPE_SHAPE: u32 = 2;
pub(crate) const SHAPE_DIM: u32 = 1;
pub(crate) const DIM_VALUE: u32 = 1;
pub(crate) const DIM_PARAM: u32 = 2;

pub(crate) const WIRE_VARINT: u8 = 0;
pub(crate) const WIRE_I64: u8 = 1;
pub(crate) const WIRE_LEN: u8 = 2;
pub(crate) const WIRE_I32: u8 = 5;

/// The fields of a node the edits read.
#[derive(Debug, Default)]
pub(crate) struct Node<'a> {
    pub(crate) inputs: Vec<&'a [u8]>,
    pub(crate) outputs: Vec<&'a [u8]>,
    pub(crate) op_type: &'a [u8],
    pub(crate) domain: &'a [u8],
    /// Each `AttributeProto`, encoded.
    pub(crate) attributes: Vec<&'a [u8]>,
}

impl<'a> Node<'a> {
    pub(crate) fn parse(bytes: &'a [u8]) -> Result<Self> {
        let mut node = Node::default();
        for field in Fields::new(bytes) {
            let field = field?;
            if field.wire != WIRE_LEN {
                continue;
            }
            match field.number {
                NODE_INPUT => node.inputs.push(field.payload),
                NODE_OUTPUT => node.outputs.push(field.payload),
                NODE_OP_TYPE => node.op_type = field.payload,
                NODE_DOMAIN => node.domain = field.payload,
                NODE_ATTRIBUTE => node.attributes.push(field.payload),
                _ => {}
            }
        }
        Ok(node)
    }

    /// An operator of the default ONNX domain.
    pub(crate) fn is(&self, op: &str) -> bool {
        self.op_type == op.as_bytes() && (self.domain.is_empty() || self.domain == b"ai.onnx")
    }
}

/// The first `number` string field of a message.
pub(crate) fn name_of(message: &[u8], number: u32) -> Result<Option<&[u8]>> {
    for field in Fields::new(message) {
        let field = field?;
        if field.number == number && field.wire == WIRE_LEN {
            return Ok(Some(field.payload));
        }
    }
    Ok(None)
}

pub(crate) fn malformed(what: &str) -> Error {
    Error::ModelFormat(what.to_string())
}

/// One field of a protobuf message: its number, wire type, the whole encoded field (key
/// included, to copy it unchanged) and its payload (a LEN field's contents).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Field<'a> {
    pub(crate) number: u32,
    pub(crate) wire: u8,
    pub(crate) raw: &'a [u8],
    pub(crate) payload: &'a [u8],
}

/// The fields of a protobuf message, in order.
pub(crate) struct Fields<'a> {
    buf: &'a [u8],
    at: usize,
    failed: bool,
}

impl<'a> Fields<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self {
            buf,
            at: 0,
            failed: false,
        }
    }

    fn next_field(&mut self) -> Result<Field<'a>> {
        let start = self.at;
        let key = read_varint(self.buf, &mut self.at)?;
        let wire = (key & 7) as u8;
        let number = u32::try_from(key >> 3).map_err(|_| malformed("field number too large"))?;
        let (payload_start, payload_end) = match wire {
            WIRE_VARINT => {
                let s = self.at;
                read_varint(self.buf, &mut self.at)?;
                (s, self.at)
            }
            WIRE_I64 | WIRE_I32 => {
                let n = if wire == WIRE_I64 { 8 } else { 4 };
                let s = self.at;
                self.at = s
                    .checked_add(n)
                    .filter(|&e| e <= self.buf.len())
                    .ok_or_else(|| malformed("truncated fixed-width field"))?;
                (s, self.at)
            }
            WIRE_LEN => {
                let len = read_varint(self.buf, &mut self.at)?;
                let s = self.at;
                self.at = usize::try_from(len)
                    .ok()
                    .and_then(|l| s.checked_add(l))
                    .filter(|&e| e <= self.buf.len())
                    .ok_or_else(|| malformed("length-delimited field past the end"))?;
                (s, self.at)
            }
            _ => return Err(malformed("unsupported protobuf wire type (a group?)")),
        };
        Ok(Field {
            number,
            wire,
            raw: &self.buf[start..self.at],
            payload: &self.buf[payload_start..payload_end],
        })
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<Field<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.at >= self.buf.len() {
            return None;
        }
        let field = self.next_field();
        self.failed = field.is_err();
        Some(field)
    }
}

pub(crate) fn read_varint(buf: &[u8], at: &mut usize) -> Result<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *buf.get(*at).ok_or_else(|| malformed("truncated varint"))?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(malformed("varint longer than 10 bytes"))
}

/// A varint field's value, from its payload (the bytes after the key).
pub(crate) fn varint(payload: &[u8]) -> Result<u64> {
    read_varint(payload, &mut 0)
}

pub(crate) fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

pub(crate) fn put_len_field(out: &mut Vec<u8>, number: u32, payload: &[u8]) {
    put_varint(out, (u64::from(number) << 3) | u64::from(WIRE_LEN));
    put_varint(out, payload.len() as u64);
    out.extend_from_slice(payload);
}

// Writers for the messages a built graph needs (the lean VAD graph, the softmax check's model).

pub(crate) fn put_varint_field(out: &mut Vec<u8>, number: u32, value: u64) {
    put_varint(out, (u64::from(number) << 3) | u64::from(WIRE_VARINT));
    put_varint(out, value);
}

pub(crate) fn attr_int(name: &str, value: i64) -> Vec<u8> {
    let mut a = Vec::new();
    put_len_field(&mut a, ATTR_NAME, name.as_bytes());
    put_varint_field(&mut a, ATTR_I, value as u64);
    put_varint_field(&mut a, ATTR_TYPE, ATTR_TYPE_INT);
    a
}

pub(crate) fn attr_ints(name: &str, values: &[i64]) -> Vec<u8> {
    let mut a = Vec::new();
    put_len_field(&mut a, ATTR_NAME, name.as_bytes());
    for &v in values {
        put_varint_field(&mut a, ATTR_INTS, v as u64);
    }
    put_varint_field(&mut a, ATTR_TYPE, ATTR_TYPE_INTS);
    a
}

pub(crate) fn attr_str(name: &str, value: &str) -> Vec<u8> {
    let mut a = Vec::new();
    put_len_field(&mut a, ATTR_NAME, name.as_bytes());
    put_len_field(&mut a, ATTR_S, value.as_bytes());
    put_varint_field(&mut a, ATTR_TYPE, ATTR_TYPE_STRING);
    a
}

pub(crate) fn tensor(name: &str, data_type: u64, dims: &[i64], raw: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    for &d in dims {
        put_varint_field(&mut t, TENSOR_DIMS, d as u64);
    }
    put_varint_field(&mut t, TENSOR_DATA_TYPE, data_type);
    put_len_field(&mut t, TENSOR_NAME, name.as_bytes());
    put_len_field(&mut t, TENSOR_RAW_DATA, raw);
    t
}

/// One dimension of a graph input's or output's shape.
#[derive(Clone, Copy)]
pub(crate) enum Dim {
    Value(i64),
    Param(&'static str),
}

pub(crate) fn value_info(name: &str, elem_type: u64, dims: &[Dim]) -> Vec<u8> {
    let mut shape = Vec::new();
    for d in dims {
        let mut dim = Vec::new();
        match *d {
            Dim::Value(v) => put_varint_field(&mut dim, DIM_VALUE, v as u64),
            Dim::Param(p) => put_len_field(&mut dim, DIM_PARAM, p.as_bytes()),
        }
        put_len_field(&mut shape, SHAPE_DIM, &dim);
    }
    let mut tensor_type = Vec::new();
    put_varint_field(&mut tensor_type, TENSOR_TYPE_ELEM, elem_type);
    // An empty shape is a scalar (`sr`); a missing one would be an unknown rank.
    put_len_field(&mut tensor_type, TENSOR_TYPE_SHAPE, &shape);
    let mut ty = Vec::new();
    put_len_field(&mut ty, TYPE_TENSOR, &tensor_type);
    let mut v = Vec::new();
    put_len_field(&mut v, VALUE_INFO_NAME, name.as_bytes());
    put_len_field(&mut v, VALUE_INFO_TYPE, &ty);
    v
}
