//! The ONNX Runtime custom operator that runs [`crate::attention_softmax`] inside the Smart
//! Turn session, in place of ONNX Runtime's fused `QLinearSoftmax`.
//!
//! [`crate::turn_graph::own_softmax_kernel`] replaces each quantised attention softmax chain
//! with one node of this operator: inputs `X` (uint8), `X_scale`, `Y_scale` (f32 scalars) and
//! `Y_zero_point` (uint8 scalar), output `Y` (uint8, `X`'s shape), softmax over the last axis;
//! attribute [`SHIFT_LOG_ATTRIBUTE`] says how the table's shift is evaluated
//! ([`ShiftLog`]). The input's zero point is not an input: a softmax does not change when every
//! value moves by the same amount, and ONNX Runtime's kernel ignores it too.

use ort::operator::{
    ComputeContext, Kernel, KernelContext, Operator, OperatorDomain, OperatorInput, OperatorOutput,
    ShapeInferenceContext,
};
use ort::value::TensorElementType;

use crate::attention_softmax::{
    lookup_table, output_multiplier, reproducible, softmax_u8, ShiftLog,
};
use crate::op_input::scalar;
use crate::{Error, Result};

/// The operator's domain, as the edited graph's nodes and opset import name it.
pub(crate) const DOMAIN: &str = "ai.ontime";
/// The operator's name.
pub(crate) const OP_TYPE: &str = "QLinearSoftmaxRows";
/// The node attribute carrying [`ShiftLog::attribute`].
pub(crate) const SHIFT_LOG_ATTRIBUTE: &str = "shift_log";

/// The domain to register on a session that runs an edited graph: this operator and the
/// attention products' ([`crate::matmul_op`]).
pub(crate) fn domain() -> Result<OperatorDomain> {
    OperatorDomain::new(DOMAIN)
        .and_then(|d| d.add(QLinearSoftmaxRows))
        .and_then(|d| d.add(crate::matmul_op::QLinearMatMulTiles))
        .map_err(Error::ort("registering the attention operators"))
}

struct QLinearSoftmaxRows;

impl Operator for QLinearSoftmaxRows {
    type Kernel<'attr> = SoftmaxKernel;

    fn name(&self) -> &str {
        OP_TYPE
    }

    fn inputs(&self) -> impl IntoIterator<Item = OperatorInput> {
        [
            OperatorInput::required(TensorElementType::Uint8),
            OperatorInput::required(TensorElementType::Float32),
            OperatorInput::required(TensorElementType::Float32),
            OperatorInput::required(TensorElementType::Uint8),
        ]
    }

    fn outputs(&self) -> impl IntoIterator<Item = OperatorOutput> {
        [OperatorOutput::required(TensorElementType::Uint8)]
    }

    fn create_kernel<'attr>(&self, ctx: &KernelContext<'attr>) -> ort::Result<SoftmaxKernel> {
        let attribute = ctx.get::<i64>(SHIFT_LOG_ATTRIBUTE).ok_or_else(|| {
            ort::Error::new(format!(
                "{OP_TYPE} without its `{SHIFT_LOG_ATTRIBUTE}` attribute"
            ))
        })?;
        let shift_log = ShiftLog::from_attribute(attribute).ok_or_else(|| {
            ort::Error::new(format!("{OP_TYPE}: `{SHIFT_LOG_ATTRIBUTE}` = {attribute}"))
        })?;
        Ok(SoftmaxKernel {
            shift_log,
            table: None,
            scratch: Vec::new(),
        })
    }

    fn infer_shape(&self, ctx: &mut ShapeInferenceContext) -> ort::Result<()> {
        // The output has the input's type and shape, which ONNX Runtime's planner then knows
        // for every node downstream.
        let input = ctx
            .inputs()
            .into_iter()
            .next()
            .ok_or_else(|| ort::Error::new(format!("{OP_TYPE} without an input")))?;
        ctx.set_output(0, &input)
    }
}

/// One node's kernel: its table, built on the first run from the node's input scale and row
/// length (constants in Smart Turn), and rebuilt only if they change.
struct SoftmaxKernel {
    shift_log: ShiftLog,
    table: Option<BuiltTable>,
    scratch: Vec<f32>,
}

/// A table and what it was built for: the input scale's bits and the row length.
struct BuiltTable {
    key: (u32, usize),
    table: Box<[f32; 256]>,
}

impl Kernel for SoftmaxKernel {
    fn compute(&mut self, ctx: &ComputeContext) -> ort::Result<()> {
        let x_scale: f32 = scalar(ctx, 1, OP_TYPE)?;
        let multiplier = output_multiplier(scalar::<f32>(ctx, 2, OP_TYPE)?);
        let zero_point: u8 = scalar(ctx, 3, OP_TYPE)?;
        let x = ctx
            .input(0)?
            .ok_or_else(|| ort::Error::new(format!("{OP_TYPE}: input 0 missing")))?;
        let (shape, xs) = x.try_extract_tensor::<u8>()?;
        let d = shape
            .last()
            .and_then(|&d| usize::try_from(d).ok())
            .filter(|&d| d > 0)
            .ok_or_else(|| ort::Error::new(format!("{OP_TYPE}: input shape {shape:?}")))?;
        let key = (x_scale.to_bits(), d);
        let table = match &mut self.table {
            Some(built) if built.key == key => &built.table,
            slot => {
                let table = Box::new(lookup_table(x_scale, d, self.shift_log));
                &slot.insert(BuiltTable { key, table }).table
            }
        };
        if !reproducible(table, multiplier) {
            return Err(ort::Error::new(format!(
                "{OP_TYPE}: rows of {d} with output multiplier {multiplier} are outside what \
                 this kernel reproduces"
            )));
        }
        let mut y = ctx
            .output(0, shape.to_vec())?
            .ok_or_else(|| ort::Error::new(format!("{OP_TYPE}: output 0 missing")))?;
        let (_, ys) = y.try_extract_tensor_mut::<u8>()?;
        if !softmax_u8(xs, d, table, multiplier, zero_point, ys, &mut self.scratch) {
            return Err(ort::Error::new(format!(
                "{OP_TYPE}: output of {} values for an input of {} in rows of {d}",
                ys.len(),
                xs.len()
            )));
        }
        Ok(())
    }
}
