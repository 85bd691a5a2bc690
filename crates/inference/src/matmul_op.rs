//! The ONNX Runtime custom operator that runs [`crate::attention_matmul`] inside the Smart Turn
//! session, in place of ONNX Runtime's fused `QLinearMatMul` for the products of two
//! activations (each attention layer's `Q·Kᵀ` and `P·V`).
//!
//! [`crate::turn_graph::own_attention_kernels`] replaces each `DequantizeLinear ×2 → MatMul →
//! QuantizeLinear` chain whose operands are both activations with one node of this operator.
//! Its inputs are `QLinearMatMul`'s: `A` (uint8), `A_scale`, `A_zero_point`, `B` (uint8),
//! `B_scale`, `B_zero_point`, `Y_scale`, `Y_zero_point` (f32 and uint8 scalars); output `Y`
//! (uint8, `[…, M, N]`).

use ort::operator::{
    ComputeContext, Kernel, KernelContext, Operator, OperatorInput, OperatorOutput,
    ShapeInferenceContext,
};
use ort::value::{Shape, SymbolicDimensions, TensorElementType, ValueType};

use crate::attention_matmul::{Dims, QuantisedMatMul, Requantisation};
use crate::op_input::scalar;

/// The operator's name (in [`crate::softmax_op::DOMAIN`]).
pub(crate) const OP_TYPE: &str = "QLinearMatMulTiles";

pub(crate) struct QLinearMatMulTiles;

impl Operator for QLinearMatMulTiles {
    type Kernel<'attr> = MatMulKernel;

    fn name(&self) -> &str {
        OP_TYPE
    }

    fn inputs(&self) -> impl IntoIterator<Item = OperatorInput> {
        use TensorElementType::{Float32, Uint8};
        [Uint8, Float32, Uint8, Uint8, Float32, Uint8, Float32, Uint8].map(OperatorInput::required)
    }

    fn outputs(&self) -> impl IntoIterator<Item = OperatorOutput> {
        [OperatorOutput::required(TensorElementType::Uint8)]
    }

    fn create_kernel<'attr>(&self, _ctx: &KernelContext<'attr>) -> ort::Result<MatMulKernel> {
        Ok(MatMulKernel {
            kernel: QuantisedMatMul::new(),
        })
    }

    fn infer_shape(&self, ctx: &mut ShapeInferenceContext) -> ort::Result<()> {
        // `[…, M, K] × […, K, N]` → `[…, M, N]`, so the planner knows every shape downstream.
        let inputs = ctx.inputs();
        let (Some(a), Some(b)) = (inputs.first(), inputs.get(3)) else {
            return Err(ort::Error::new(format!("{OP_TYPE} without its operands")));
        };
        let (
            ValueType::Tensor {
                ty,
                shape: a_shape,
                dimension_symbols: a_symbols,
            },
            ValueType::Tensor {
                shape: b_shape,
                dimension_symbols: b_symbols,
                ..
            },
        ) = (a, b)
        else {
            return Err(ort::Error::new(format!("{OP_TYPE}: operands not tensors")));
        };
        let (Some(&n), Some(n_symbol)) = (b_shape.last(), b_symbols.last()) else {
            return Err(ort::Error::new(format!("{OP_TYPE}: B has no dimensions")));
        };
        let mut dims: Vec<i64> = a_shape.to_vec();
        let mut symbols: Vec<String> = a_symbols.to_vec();
        match (dims.last_mut(), symbols.last_mut()) {
            (Some(d), Some(s)) => {
                *d = n;
                *s = n_symbol.clone();
            }
            _ => return Err(ort::Error::new(format!("{OP_TYPE}: A has no dimensions"))),
        }
        ctx.set_output(
            0,
            &ValueType::Tensor {
                ty: *ty,
                shape: Shape::from(dims),
                dimension_symbols: SymbolicDimensions::new(symbols),
            },
        )
    }
}

/// One node's kernel and the buffers it reuses.
pub(crate) struct MatMulKernel {
    kernel: QuantisedMatMul,
}

impl Kernel for MatMulKernel {
    fn compute(&mut self, ctx: &ComputeContext) -> ort::Result<()> {
        let rq = Requantisation::new(
            scalar(ctx, 1, OP_TYPE)?,
            scalar(ctx, 2, OP_TYPE)?,
            scalar(ctx, 4, OP_TYPE)?,
            scalar(ctx, 5, OP_TYPE)?,
            scalar(ctx, 6, OP_TYPE)?,
            scalar(ctx, 7, OP_TYPE)?,
        );
        let operand = |index: usize| {
            ctx.input(index)?
                .ok_or_else(|| ort::Error::new(format!("{OP_TYPE}: input {index} missing")))
        };
        let (a, b) = (operand(0)?, operand(3)?);
        let (a_shape, a_values) = a.try_extract_tensor::<u8>()?;
        let (b_shape, b_values) = b.try_extract_tensor::<u8>()?;
        let dims = Dims::of(a_shape, b_shape).ok_or_else(|| {
            ort::Error::new(format!(
                "{OP_TYPE}: operands {a_shape:?} × {b_shape:?} (same leading dimensions wanted)"
            ))
        })?;
        let mut y_shape = a_shape.to_vec();
        if let Some(last) = y_shape.last_mut() {
            *last = dims.n as i64;
        }
        let mut y = ctx
            .output(0, y_shape)?
            .ok_or_else(|| ort::Error::new(format!("{OP_TYPE}: output 0 missing")))?;
        let (_, y_values) = y.try_extract_tensor_mut::<u8>()?;
        if !self.kernel.run(a_values, b_values, dims, &rq, y_values) {
            return Err(ort::Error::new(format!(
                "{OP_TYPE}: {} and {} operand values, {} output values for {dims:?}",
                a_values.len(),
                b_values.len(),
                y_values.len()
            )));
        }
        Ok(())
    }
}
