//! A custom operator's scalar inputs: the scales and zero points that ontime's operators take
//! as inputs, as ONNX Runtime's quantised kernels do.

use ort::operator::ComputeContext;
use ort::value::PrimitiveTensorElementType;

/// Input `index` of operator `op`, which must hold exactly one value.
pub(crate) fn scalar<T: PrimitiveTensorElementType + Copy>(
    ctx: &ComputeContext,
    index: usize,
    op: &str,
) -> ort::Result<T> {
    let value = ctx
        .input(index)?
        .ok_or_else(|| ort::Error::new(format!("{op}: input {index} missing")))?;
    match value.try_extract_tensor::<T>()?.1 {
        [v] => Ok(*v),
        values => Err(ort::Error::new(format!(
            "{op}: input {index} has {} values, a scalar expected",
            values.len()
        ))),
    }
}
