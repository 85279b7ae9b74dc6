//! The progress line `rtit record` keeps on a terminal: what the backend has traced so far,
//! in numbers a reader takes in at a glance (digits grouped by thousands, tenths of seconds).

/// `n` with its digits grouped by thousands: 1234567 → "1,234,567".
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The step backend's line: instructions and their rate.
pub fn step_line(instructions: u64, seconds: f64) -> String {
    let rate = instructions as f64 / seconds.max(1e-3);
    format!(
        "rtit: {} instructions traced, {seconds:.1} s ({} a second)",
        grouped(instructions),
        grouped(rate as u64)
    )
}

/// The qemu backend's line: instructions, trace bytes, elapsed time and the rate.
pub fn qemu_line(instructions: u64, trace_bytes: u64, seconds: f64) -> String {
    format!(
        "rtit: {} instructions traced, {:.1} MB of trace, {seconds:.1} s ({:.0} M/s)",
        grouped(instructions),
        trace_bytes as f64 / 1e6,
        instructions as f64 / seconds.max(1e-3) / 1e6
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_group_by_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(86_556_338), "86,556,338");
        assert_eq!(grouped(u64::MAX), "18,446,744,073,709,551,615");
    }

    #[test]
    fn lines_say_count_size_time_and_rate() {
        assert_eq!(
            qemu_line(1_200_115_186, 33_406_548, 2.54),
            "rtit: 1,200,115,186 instructions traced, 33.4 MB of trace, 2.5 s (472 M/s)"
        );
        assert_eq!(
            step_line(48_000, 3.0),
            "rtit: 48,000 instructions traced, 3.0 s (16,000 a second)"
        );
    }
}
