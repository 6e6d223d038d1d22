fn apply(layer: Linear[IN, OUT], x: f32[B, IN]) -> f32[B, OUT]
fn forward(m: MLP[IN, H, OUT], x: f32[B, IN]) -> f32[B, OUT]
fn widths(m: MLP[IN, H, OUT]) -> (i64, i64, i64)
fn zero_layer(w: f32[I, O]) -> Linear[I, O]
fn build(inputs: i64, hidden: i64) -> MLP[3, 4, 2]
fn sum_pair(p: Pair) -> f32
fn main() -> ()
