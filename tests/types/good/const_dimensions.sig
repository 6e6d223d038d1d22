fn encode(e: Encoder, x: f32[B, 6]) -> f32[B, 4]
fn init() -> Encoder
fn main() -> ()
