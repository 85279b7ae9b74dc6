//! How a disagreement between trace and code travels from where it is found to where the
//! decoder reports it and resynchronises: the offset, the instruction and what is wrong.

/// A disagreement between trace and code: where, and what. With `end`, the trace simply
/// ended where a branch needed a packet (tracing was stopped without FUP.PGD): no error.
pub(super) struct Failure {
    pub(super) ip: Option<u64>,
    pub(super) offset: usize,
    pub(super) message: String,
    pub(super) end: bool,
    /// Trace data was lost here (a recorded gap), this many bytes if known.
    pub(super) lost: Option<Option<u64>>,
    /// The failure is the source's next item (a decode error), left there by `peek` so that
    /// a caller that only looks ahead cannot drop it; `fail` consumes it.
    pub(super) from_source: bool,
}

impl Failure {
    #[cold]
    pub(super) fn new(ip: Option<u64>, offset: usize, message: String) -> Box<Self> {
        Box::new(Self {
            ip,
            offset,
            message,
            end: false,
            lost: None,
            from_source: false,
        })
    }
}

/// Failures are boxed: they are rare, and a small `Result` stays in registers on the hot path.
pub(super) type Step<T> = Result<T, Box<Failure>>;
