//! The cost model: time of an op on a device, of a transfer between devices, and of
//! collectives over a group of devices.
//!
//! - **Ops.** [`crate::op_work`] gives an op's FLOPs and bytes from its shapes. Its time on a
//!   device is, in order of precedence: a measurement from a calibration file
//!   ([`Calibration`]); the target's own [`Target::op_time`]; else the roofline
//!   `overhead + max(flops / (rate · efficiency), bytes / memory bandwidth)`, where `rate` is
//!   the device's peak for the op's element type (falling back to its `f32` rate, as a device
//!   without a 16-bit unit upcasts), `efficiency` the device's factor for the op name (1 when
//!   absent) and `overhead` its per-op `op_overhead`. `const` ops cost nothing: weights are
//!   resident where they are used. A calibration's scale, where no measurement matches,
//!   turns the hook's or roofline's time `t` into `overhead + factor × t + flop_seconds ×
//!   FLOPs + byte_seconds × bytes` ([`crate::Scale`]). Nor do communication ops as ops: a `transfer`'s time is
//!   the link transfer into it (charged by the simulator on the edge from `from` to `to`),
//!   and a collective's is [`CostModel::collective_time`]; on one device they are free. A device cannot run an op that is outside its
//!   `supported_ops`, whose element type it has no rate for (nor `f32`), or that the target's
//!   [`Target::unsupported`] refuses; such answers carry the reason.
//! - **Transfers** take the route of [`TargetSpec::route`] (fewest hops, then widest) and are
//!   cut-through: `sum of link latencies + bytes / slowest link bandwidth`. Each direction of
//!   a link is its own channel.
//! - **Collectives** run as rings over the given device order. A ring all-reduce of `B` bytes
//!   over `p` devices is `2(p-1)` steps (reduce-scatter, then all-gather) in which every device
//!   sends `B/p` bytes to the next; an all-gather or reduce-scatter of `B` bytes (the full
//!   tensor) is `p-1` such steps. A step lasts as long as its slowest transfer, where transfers
//!   whose routes share a link direction share its bandwidth: `max route latency + max over
//!   link directions (bytes crossing it / its bandwidth)`. The reduction arithmetic itself is
//!   not counted. An all-reduce over devices that span two levels of the topology (nodes
//!   whose devices share faster links than those between nodes, [`two_levels`]) takes the
//!   faster of the flat ring and the hierarchical algorithm (within each node a
//!   reduce-scatter, across the nodes one all-reduce per rail, within each node an
//!   all-gather: [`CostModel::all_reduce_plan`]); the simulator charges the links what the
//!   algorithm taken sends ([`CostModel::collective_loads`]).
//! - **Sharded ops** ([`CostModel::op_time_sharded`]): an op split into `parts` equal pieces
//!   does `1/parts` of the work on each device: the roofline with FLOPs and bytes divided
//!   (the per-op overhead is paid in full; a scale's work terms take the piece's work, its
//!   overhead paid in full too), or a measured or target-given time divided.
//! - **Mesh collectives** ([`CostModel::collective_time`]): an `all-reduce`, `all-gather`,
//!   `reduce-scatter` or `all-to-all` over mesh axes runs one ring per group of devices along
//!   those axes ([`Mesh::groups`]), all groups at once; their transfers share links as in one
//!   ring step. The bytes `b` are what one device holds: the operand (all-reduce,
//!   reduce-scatter, all-to-all) or the result (all-gather), each divided by the number of
//!   pieces its sharding cuts it into; every step moves `b/p`, `2(p-1)` steps for an
//!   all-reduce and `p-1` for the others (an all-to-all's device sends `b/p` to each of the
//!   `p-1` others, one per step).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use crate::ir::{Graph, Mesh, Op, OpId};
use crate::{Calibration, Device, Router, Target, TargetError, TargetSpec, WorkError, op_work};

/// Where an op's modelled time came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeSource {
    /// The roofline, limited by compute.
    ComputeBound,
    /// The roofline, limited by memory bandwidth.
    MemoryBound,
    /// The target's own cost hook.
    Target,
    /// A calibration file's measurement.
    Calibrated,
    /// The target's hook or the roofline times a calibration file's scale.
    Scaled,
    /// A `const` op (no time).
    Free,
}

impl TimeSource {
    /// A short label for tables: `compute`, `memory`, `target`, `calibrated`, `scaled`,
    /// `free`.
    pub fn label(self) -> &'static str {
        match self {
            TimeSource::ComputeBound => "compute",
            TimeSource::MemoryBound => "memory",
            TimeSource::Target => "target",
            TimeSource::Calibrated => "calibrated",
            TimeSource::Scaled => "scaled",
            TimeSource::Free => "free",
        }
    }
}

/// The modelled time of one op on one device, or why the device cannot run it.
#[derive(Clone, Debug, PartialEq)]
pub enum OpTime {
    /// The device runs the op in `seconds`.
    Time {
        /// Modelled seconds.
        seconds: f64,
        /// Which rule gave it.
        source: TimeSource,
    },
    /// The device cannot run the op.
    Unsupported(String),
}

impl OpTime {
    /// The seconds, when the device can run the op.
    pub fn seconds(&self) -> Option<f64> {
        match self {
            OpTime::Time { seconds, .. } => Some(*seconds),
            OpTime::Unsupported(_) => None,
        }
    }
}

/// A route between two devices, summarised for the link model.
#[derive(Clone, Debug, Default)]
struct Route {
    /// Directed channels (`2 * link + direction`), in travel order.
    channels: Vec<usize>,
    /// Sum of the links' latencies.
    latency: f64,
    /// The slowest link's bandwidth (infinite for an empty route).
    bandwidth: f64,
}

/// The cost model of one target. Routes are found once per source device, when a transfer
/// from it is first costed (a target of many devices costs only the sources it uses).
pub struct CostModel<'a> {
    target: &'a dyn Target,
    calibration: Option<&'a Calibration>,
    /// The links indexed by device.
    router: Router<'a>,
    /// `routes[from]`, once asked for: `[to]`, `None` where no route exists.
    routes: Vec<OnceLock<Vec<Option<Route>>>>,
}

impl std::fmt::Debug for CostModel<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CostModel")
            .field("target", &self.target.spec().name)
            .finish_non_exhaustive()
    }
}

impl<'a> CostModel<'a> {
    /// The cost model of `target`, with measured op times from `calibration` if given.
    pub fn new(target: &'a dyn Target, calibration: Option<&'a Calibration>) -> CostModel<'a> {
        let spec = target.spec();
        CostModel {
            target,
            calibration,
            router: spec.router(),
            routes: (0..spec.devices.len()).map(|_| OnceLock::new()).collect(),
        }
    }

    /// The target this model describes.
    pub fn target(&self) -> &'a dyn Target {
        self.target
    }

    /// The target's description.
    pub fn spec(&self) -> &'a TargetSpec {
        self.target.spec()
    }

    /// The number of directed link channels (two per link), as the simulator counts them.
    pub fn num_channels(&self) -> usize {
        2 * self.spec().links.len()
    }

    /// The time of `op` on device `device` (an index into the spec's devices).
    pub fn op_time(&self, graph: &Graph, op: OpId, device: usize) -> Result<OpTime, WorkError> {
        let d = &self.spec().devices[device];
        let data = graph.op(op);
        if matches!(
            data.op,
            Op::Const(_)
                | Op::Transfer { .. }
                | Op::AllReduce { .. }
                | Op::AllGather { .. }
                | Op::AllSlice { .. }
                | Op::ReduceScatter { .. }
                | Op::AllToAll { .. }
        ) {
            return Ok(OpTime::Time {
                seconds: 0.0,
                source: TimeSource::Free,
            });
        }
        let name = data.op.name();
        if let Some(ops) = &d.supported_ops
            && !ops.contains(name)
        {
            return Ok(OpTime::Unsupported(format!(
                "{} does not support `{name}` (not in its supported_ops)",
                d.name
            )));
        }
        if let Some(why) = self.target.unsupported(graph, op, d) {
            return Ok(OpTime::Unsupported(why));
        }
        if let Some(c) = self.calibration
            && let Some(seconds) = c.lookup(graph, op, d)
        {
            return Ok(OpTime::Time {
                seconds,
                source: TimeSource::Calibrated,
            });
        }
        let scale = self.calibration.and_then(|c| c.scale(graph, op, d));
        let work = op_work(graph, op)?;
        let scaled = |t: OpTime| match (t, scale) {
            (OpTime::Time { seconds, .. }, Some(f)) => OpTime::Time {
                seconds: f.apply(seconds, work.flops, work.bytes),
                source: TimeSource::Scaled,
            },
            (t, _) => t,
        };
        if let Some(seconds) = self.target.op_time(graph, op, d, &work) {
            if !seconds.is_finite() || seconds < 0.0 {
                return Ok(OpTime::Unsupported(format!(
                    "target `{}` gave {seconds} s for `{name}` on {}; times must be finite and \
                     not negative",
                    self.spec().name,
                    d.name
                )));
            }
            return Ok(scaled(OpTime::Time {
                seconds,
                source: TimeSource::Target,
            }));
        }
        Ok(scaled(roofline(
            d,
            name,
            work.flops,
            work.bytes,
            work.elem.name(),
        )))
    }

    /// The time of `op` on `device` when it is split into `parts` equal pieces, one per
    /// device: the work divided by `parts` (see the module doc). `parts <= 1` is
    /// [`CostModel::op_time`].
    pub fn op_time_sharded(
        &self,
        graph: &Graph,
        op: OpId,
        device: usize,
        parts: u64,
    ) -> Result<OpTime, WorkError> {
        let whole = self.op_time(graph, op, device)?;
        if parts <= 1 {
            return Ok(whole);
        }
        let p = parts as f64;
        Ok(match whole {
            OpTime::Time {
                source: TimeSource::ComputeBound | TimeSource::MemoryBound,
                ..
            } => {
                let work = op_work(graph, op)?;
                roofline(
                    &self.spec().devices[device],
                    graph.op(op).op.name(),
                    work.flops / p,
                    work.bytes / p,
                    work.elem.name(),
                )
            }
            // A scaled time's overhead is every piece's; its factor and work terms scale
            // the piece.
            OpTime::Time {
                source: TimeSource::Scaled,
                ..
            } => {
                let d = &self.spec().devices[device];
                let scale = self.calibration.and_then(|c| c.scale(graph, op, d));
                let work = op_work(graph, op)?;
                let piece = match self.target.op_time(graph, op, d, &work) {
                    Some(t) => t / p,
                    None => roofline(
                        d,
                        graph.op(op).op.name(),
                        work.flops / p,
                        work.bytes / p,
                        work.elem.name(),
                    )
                    .seconds()
                    .unwrap_or(0.0),
                };
                OpTime::Time {
                    seconds: scale
                        .map_or(piece, |f| f.apply(piece, work.flops / p, work.bytes / p)),
                    source: TimeSource::Scaled,
                }
            }
            OpTime::Time { seconds, source } => OpTime::Time {
                seconds: seconds / p,
                source,
            },
            unsupported @ OpTime::Unsupported(_) => unsupported,
        })
    }

    /// Seconds for the collective `op` (`all-reduce`, `all-gather`, `reduce-scatter` or
    /// `all-to-all`; 0 for any other op)
    /// over `mesh`, whose devices are `devices` (target device indices, in the mesh's
    /// row-major order), with `bytes` held per device (see the module doc).
    pub fn collective_time(
        &self,
        op: &Op,
        mesh: &Mesh,
        devices: &[usize],
        bytes: f64,
    ) -> Result<f64, TargetError> {
        Ok(self.collective_plan(op, mesh, devices, bytes)?.0)
    }

    /// The bytes a collective (as [`CostModel::collective_time`]) moves over each directed
    /// channel, sorted by channel: for its rings, every hop's route carries what the
    /// algorithm sends over that hop in all its steps.
    pub fn collective_loads(
        &self,
        op: &Op,
        mesh: &Mesh,
        devices: &[usize],
        bytes: f64,
    ) -> Result<Vec<(usize, f64)>, TargetError> {
        let (_, hops) = self.collective_plan(op, mesh, devices, bytes)?;
        let mut out: BTreeMap<usize, f64> = BTreeMap::new();
        for (from, to, sent) in hops {
            for &c in self.channels(from, to)? {
                *out.entry(c).or_insert(0.0) += sent;
            }
        }
        Ok(out.into_iter().collect())
    }

    /// A collective's seconds and its hops `(from, to, bytes sent over the hop in all
    /// steps)`: one ring per group of devices along the op's axes, all at once, or for an
    /// all-reduce over one group that spans two levels of the topology the hierarchical
    /// algorithm when it is faster ([`CostModel::all_reduce_plan`]).
    fn collective_plan(
        &self,
        op: &Op,
        mesh: &Mesh,
        devices: &[usize],
        bytes: f64,
    ) -> Result<(f64, Vec<Hop>), TargetError> {
        let Some(axes) = op.collective_axes() else {
            return Ok((0.0, Vec::new()));
        };
        let rings: Vec<Vec<usize>> = mesh
            .groups(axes)
            .into_iter()
            .map(|g| {
                g.into_iter()
                    .filter_map(|i| devices.get(i).copied())
                    .collect()
            })
            .collect();
        let p = rings.iter().map(Vec::len).max().unwrap_or(0);
        if p < 2 {
            return Ok((0.0, Vec::new()));
        }
        if let (Op::AllReduce { .. }, [ring]) = (op, rings.as_slice()) {
            // `bytes` is what one device holds: the whole tensor the all-reduce sums.
            return self.all_reduce_plan(ring, bytes);
        }
        let steps = ring_steps(op, p) as f64;
        let step = self.rings_step(&rings, bytes / p as f64)?;
        let hops = rings
            .iter()
            .flat_map(|r| ring_hops(r, steps * bytes / p as f64))
            .collect();
        Ok((steps * step, hops))
    }

    /// The directed channels the rings of a collective over `axes` use, sorted, each with
    /// the number of ring hops (over every group's ring) that cross it.
    pub fn collective_channels(
        &self,
        mesh: &Mesh,
        devices: &[usize],
        axes: &[u32],
    ) -> Result<Vec<(usize, usize)>, TargetError> {
        let mut out: BTreeMap<usize, usize> = BTreeMap::new();
        for g in mesh.groups(axes) {
            let ring: Vec<usize> = g
                .into_iter()
                .filter_map(|i| devices.get(i).copied())
                .collect();
            if ring.len() < 2 {
                continue;
            }
            for i in 0..ring.len() {
                for &c in self.channels(ring[i], ring[(i + 1) % ring.len()])? {
                    *out.entry(c).or_insert(0) += 1;
                }
            }
        }
        Ok(out.into_iter().collect())
    }

    /// Seconds to move `bytes` from device `from` to device `to` (0 when they are the same).
    pub fn transfer_time(&self, from: usize, to: usize, bytes: f64) -> Result<f64, TargetError> {
        if from == to {
            return Ok(0.0);
        }
        if let Some(t) = self.target.transfer_time(from, to, bytes)
            && t.is_finite()
            && t >= 0.0
        {
            return Ok(t);
        }
        let r = self.route(from, to)?;
        Ok(r.latency + bytes / r.bandwidth)
    }

    /// The directed channels a transfer from `from` to `to` occupies, in travel order.
    pub fn channels(&self, from: usize, to: usize) -> Result<&[usize], TargetError> {
        if from == to {
            return Ok(&[]);
        }
        Ok(&self.route(from, to)?.channels)
    }

    /// The link and direction of a channel: `(link index, forward)` where forward means from
    /// the link's `a` to its `b`.
    pub fn channel_link(channel: usize) -> (usize, bool) {
        (channel / 2, channel.is_multiple_of(2))
    }

    fn route(&self, from: usize, to: usize) -> Result<&Route, TargetError> {
        let spec = self.spec();
        let unknown = |i: usize| TargetError::UnknownDevice {
            target: spec.name.clone(),
            device: format!("#{i}"),
        };
        let routes = self
            .routes
            .get(from)
            .ok_or_else(|| unknown(from))?
            .get_or_init(|| routes_from(spec, &self.router, from));
        routes
            .get(to)
            .ok_or_else(|| unknown(to))?
            .as_ref()
            .ok_or_else(|| TargetError::Unreachable {
                target: self.spec().name.clone(),
                from: self.spec().devices[from].name.clone(),
                to: self.spec().devices[to].name.clone(),
            })
    }

    /// One ring step: device `ring[i]` sends `chunk` bytes to `ring[i + 1]` (cyclically), all
    /// at once; transfers sharing a link direction share its bandwidth.
    fn ring_step(&self, ring: &[usize], chunk: f64) -> Result<f64, TargetError> {
        self.rings_step(&[ring.to_vec()], chunk)
    }

    /// One step of several rings at once; all their transfers share the links.
    fn rings_step(&self, rings: &[Vec<usize>], chunk: f64) -> Result<f64, TargetError> {
        let mut latency: f64 = 0.0;
        let mut load: BTreeMap<usize, f64> = BTreeMap::new();
        for ring in rings {
            let p = ring.len();
            for i in 0..p {
                let (from, to) = (ring[i], ring[(i + 1) % p]);
                if from == to {
                    continue;
                }
                if let Some(t) = self.target.transfer_time(from, to, chunk)
                    && t.is_finite()
                    && t >= 0.0
                {
                    latency = latency.max(t);
                    continue;
                }
                let r = self.route(from, to)?;
                latency = latency.max(r.latency);
                for &c in &r.channels {
                    *load.entry(c).or_insert(0.0) += chunk;
                }
            }
        }
        let links = &self.spec().links;
        let serial = load
            .iter()
            .map(|(&c, &bytes)| bytes / links[c / 2].bandwidth)
            .fold(0.0, f64::max);
        Ok(latency + serial)
    }

    /// Seconds for an all-reduce of a `bytes`-byte tensor over `ring` (device indices, in
    /// ring order): the flat ring, or the hierarchical algorithm where the ring spans two
    /// levels and that is faster ([`CostModel::all_reduce_plan`]). Zero for fewer than two
    /// devices.
    pub fn all_reduce_time(&self, ring: &[usize], bytes: f64) -> Result<f64, TargetError> {
        Ok(self.all_reduce_plan(ring, bytes)?.0)
    }

    /// An all-reduce's seconds and hops (as `collective_plan`). The flat ring: `2(p-1)` steps
    /// of `B/p`. Where [`two_levels`] groups the ring into `n` nodes of `k` devices (the links
    /// within a node faster than those between nodes: NVLink inside a server, InfiniBand
    /// across), also the hierarchical algorithm of Horovod and NCCL (Sergeev and Del Balso,
    /// 2018; Jia et al., 2018): a reduce-scatter within every node (`k-1` steps of `B/k`, the
    /// nodes' rings at once), an all-reduce of each `B/k` shard across the nodes over `k`
    /// rails at once (the `i`-th device of every node; `2(n-1)` steps of `B/(kn)`), and an
    /// all-gather within every node (`k-1` steps of `B/k`). The faster of the two is taken,
    /// as NCCL chooses its algorithm by size and topology. A target whose own transfer times
    /// override the links' ([`Target::transfer_time`]) is timed on the flat ring only.
    pub fn all_reduce_plan(
        &self,
        ring: &[usize],
        bytes: f64,
    ) -> Result<(f64, Vec<Hop>), TargetError> {
        let p = ring.len();
        if p < 2 {
            return Ok((0.0, Vec::new()));
        }
        let steps = 2.0 * (p - 1) as f64;
        let flat = steps * self.ring_step(ring, bytes / p as f64)?;
        let flat_hops = || ring_hops(ring, steps * bytes / p as f64).collect();
        let overridden = ring.iter().any(|&a| {
            ring.iter()
                .any(|&b| a != b && self.target.transfer_time(a, b, 1.0).is_some())
        });
        if overridden {
            return Ok((flat, flat_hops()));
        }
        let mut widths = vec![0.0; p * p];
        for i in 0..p {
            for j in 0..p {
                if i != j {
                    widths[i * p + j] = self.width(ring[i], ring[j])?;
                }
            }
        }
        let Some(nodes) = two_levels(p, |i, j| widths[i * p + j]) else {
            return Ok((flat, flat_hops()));
        };
        let nodes: Vec<Vec<usize>> = nodes
            .into_iter()
            .map(|n| n.into_iter().map(|i| ring[i]).collect())
            .collect();
        let [(nodes, intra_steps, k), (rails, inter_steps, kn)] = hierarchical_phases(nodes);
        let (k, kn) = (k as f64, kn as f64);
        let hier = intra_steps * self.rings_step(&nodes, bytes / k)?
            + inter_steps * self.rings_step(&rails, bytes / kn)?;
        if hier >= flat {
            return Ok((flat, flat_hops()));
        }
        let hops = nodes
            .iter()
            .flat_map(|r| ring_hops(r, intra_steps * bytes / k))
            .chain(
                rails
                    .iter()
                    .flat_map(|r| ring_hops(r, inter_steps * bytes / kn)),
            )
            .collect();
        Ok((hier, hops))
    }

    /// The bandwidth of the route from `from` to `to`: its narrowest link's.
    fn width(&self, from: usize, to: usize) -> Result<f64, TargetError> {
        let links = &self.spec().links;
        Ok(self
            .channels(from, to)?
            .iter()
            .map(|&c| links[c / 2].bandwidth)
            .fold(f64::INFINITY, f64::min))
    }

    /// Seconds for a ring all-gather producing a `bytes`-byte tensor on every device of
    /// `ring` (each starts with `bytes / p`). A reduce-scatter costs the same.
    pub fn all_gather_time(&self, ring: &[usize], bytes: f64) -> Result<f64, TargetError> {
        let p = ring.len();
        if p < 2 {
            return Ok(0.0);
        }
        let step = self.ring_step(ring, bytes / p as f64)?;
        Ok((p - 1) as f64 * step)
    }
}

/// One hop of a collective's rings: from, to, and the bytes sent over it in all the steps.
pub type Hop = (usize, usize, f64);

/// The hops of a ring over `ring` (each device to the next, the last to the first), each
/// carrying `sent` bytes; none for fewer than two devices.
fn ring_hops(ring: &[usize], sent: f64) -> impl Iterator<Item = Hop> + '_ {
    let p = ring.len();
    (0..if p < 2 { 0 } else { p }).map(move |i| (ring[i], ring[(i + 1) % p], sent))
}

/// The two phases of the hierarchical all-reduce over `nodes` (as [`two_levels`] finds them,
/// `n` nodes of `k` devices each), each as (its rings, run at once; its steps; `parts`: each
/// step sends `1/parts` of the tensor): the nodes' rings (a reduce-scatter, then an
/// all-gather: `2(k-1)` steps of `1/k`), and the rails' (the `i`-th device of every node: an
/// all-reduce of each shard, `2(n-1)` steps of `1/(kn)`). The time is the sum over the
/// phases of steps times a step of the rings at once, however a caller times a step
/// ([`CostModel::all_reduce_plan`], and the placement model's reshards).
pub fn hierarchical_phases(nodes: Vec<Vec<usize>>) -> [(Vec<Vec<usize>>, f64, usize); 2] {
    let (n, k) = (nodes.len(), nodes.first().map_or(0, Vec::len));
    let rails: Vec<Vec<usize>> = (0..k)
        .map(|i| nodes.iter().map(|node| node[i]).collect())
        .collect();
    [
        (nodes, 2.0 * (k as f64 - 1.0), k),
        (rails, 2.0 * (n as f64 - 1.0), k * n),
    ]
}

/// The nodes of a two-level topology among `p` devices, as positions `0..p` in order, given
/// the bandwidth `width(i, j)` of the route between each pair: the groups that routes wider
/// than the narrowest of all connect (servers, whose GPUs share NVLink, joined by a slower
/// network). `None` unless there are two or more such nodes, all of one size of at least two
/// (one level, or an uneven split: the flat ring serves).
pub fn two_levels(p: usize, width: impl Fn(usize, usize) -> f64) -> Option<Vec<Vec<usize>>> {
    if p < 4 {
        return None;
    }
    let mut narrowest = f64::INFINITY;
    for i in 0..p {
        for j in 0..p {
            if i != j {
                narrowest = narrowest.min(width(i, j));
            }
        }
    }
    // Union-find over the wider routes.
    let mut parent: Vec<usize> = (0..p).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for i in 0..p {
        for j in 0..p {
            if i != j && width(i, j) > narrowest {
                let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                if a != b {
                    parent[a.max(b)] = a.min(b);
                }
            }
        }
    }
    let mut nodes: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for i in 0..p {
        let r = root(&mut parent, i);
        nodes.entry(r).or_default().push(i);
    }
    let nodes: Vec<Vec<usize>> = nodes.into_values().collect();
    let k = nodes[0].len();
    (nodes.len() >= 2 && k >= 2 && nodes.iter().all(|n| n.len() == k)).then_some(nodes)
}

/// The roofline time of an op with `flops` and `bytes` of work in element type `elem` on `d`.
pub fn roofline(d: &Device, op_name: &str, flops: f64, bytes: f64, elem: &str) -> OpTime {
    let compute = if flops > 0.0 {
        let Some(rate) = d.compute.get(elem).or_else(|| d.compute.get("f32")) else {
            return OpTime::Unsupported(format!(
                "{} has no compute rate for {elem} (nor f32)",
                d.name
            ));
        };
        let eff = d.efficiency.get(op_name).copied().unwrap_or(1.0);
        flops / (rate * eff)
    } else {
        0.0
    };
    let memory = if bytes > 0.0 {
        if d.memory_bandwidth <= 0.0 {
            return OpTime::Unsupported(format!("{} has no memory bandwidth", d.name));
        }
        bytes / d.memory_bandwidth
    } else {
        0.0
    };
    let source = if compute >= memory {
        TimeSource::ComputeBound
    } else {
        TimeSource::MemoryBound
    };
    OpTime::Time {
        seconds: d.op_overhead + compute.max(memory),
        source,
    }
}

/// The routes from device `src` to every device, as [`TargetSpec::route`] gives them, from
/// one search.
fn routes_from(spec: &TargetSpec, router: &Router<'_>, src: usize) -> Vec<Option<Route>> {
    let tree = router.tree(src);
    (0..spec.devices.len())
        .map(|dst| {
            if !tree.reaches(dst) {
                return None;
            }
            let mut channels: Vec<usize> = tree.channels_back(dst).collect();
            channels.reverse();
            Some(Route {
                channels,
                latency: tree.latency(dst).unwrap_or(0.0),
                bandwidth: tree.bandwidth(dst).unwrap_or(f64::INFINITY),
            })
        })
        .collect()
}

/// The ring steps of the collective `op` over `p` devices, each sending `1/p` of what a
/// device holds to the next: `2(p-1)` for an all-reduce, `p-1` for an all-gather,
/// reduce-scatter or all-to-all, 0 for any other op (see the module doc).
pub fn ring_steps(op: &Op, p: usize) -> usize {
    let hops = p.saturating_sub(1);
    match op {
        Op::AllReduce { .. } => 2 * hops,
        Op::AllGather { .. } | Op::ReduceScatter { .. } | Op::AllToAll { .. } => hops,
        _ => 0,
    }
}
