//! Times `auto` on the synthetic layered DAG on a 4x4 mesh (the bench's case):
//! `cargo run --release -p tessera-place --example auto_mesh -- [ops] [objective] [rows]
//! [cols]` (defaults: 100000 throughput 4 4).

#[path = "../tests/common/mesh.rs"]
mod mesh;

use std::time::Instant;

use tessera_place::strategy::{self, SolveOptions};
use tessera_place::{Instance, Objective, violation};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).map_or(Ok(100_000), |s| s.parse())?;
    let objective: Objective = args
        .get(2)
        .map_or(Ok(Objective::Throughput), |s| s.parse())?;
    let rows: usize = args.get(3).map_or(Ok(4), |s| s.parse())?;
    let cols: usize = args.get(4).map_or(Ok(4), |s| s.parse())?;
    let inst = Instance::new(mesh::layered_mesh(n, rows, cols, 7))?;
    let opts = SolveOptions { objective };
    for name in strategy::auto_candidates(&inst) {
        let t = Instant::now();
        let r = strategy::run(name, &inst, &opts);
        let v = r.map(|(s, _, _)| s.value(&inst, objective));
        println!("{name:>12}: {:>8.3} s  {v:?}", t.elapsed().as_secs_f64());
    }
    let t = Instant::now();
    let (sol, chosen, _) = strategy::run("auto", &inst, &opts)?;
    let secs = t.elapsed().as_secs_f64();
    println!(
        "auto: {n} ops, {objective}: {secs:.3} s, chose {chosen}, value {:.6e}, feasible: {}",
        sol.value(&inst, objective),
        violation(&inst, &sol.assign).is_none()
    );
    Ok(())
}
