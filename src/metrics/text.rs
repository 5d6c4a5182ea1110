//! The format's text: families written once each (`# HELP`, `# TYPE`, then their samples),
//! label values and help text escaped, values as the format spells them.

use std::fmt::Write;

/// A family's type, as its `# TYPE` line says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    Counter,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        }
    }
}

/// One metric family and its samples, in the order they were added.
pub struct Family {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    samples: Vec<(Vec<(&'static str, String)>, f64)>,
}

impl Family {
    pub fn new(name: &'static str, kind: Kind, help: &'static str) -> Self {
        Family {
            name,
            kind,
            help,
            samples: Vec::new(),
        }
    }

    /// A sample with these labels (name, value).
    pub fn add(&mut self, labels: &[(&'static str, &str)], value: f64) {
        let labels = labels.iter().map(|&(k, v)| (k, v.to_string())).collect();
        self.samples.push((labels, value));
    }

    /// A sample when there is a figure (`None`: not known, no sample).
    pub fn add_some(&mut self, labels: &[(&'static str, &str)], value: Option<f64>) {
        if let Some(value) = value {
            self.add(labels, value);
        }
    }

    /// `# HELP`, `# TYPE`, then one line per sample.
    pub fn write(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, escape_help(self.help));
        let _ = writeln!(out, "# TYPE {} {}", self.name, self.kind.as_str());
        for (labels, value) in &self.samples {
            out.push_str(self.name);
            if !labels.is_empty() {
                out.push('{');
                for (i, (key, value)) in labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{key}=\"{}\"", escape_label(value));
                }
                out.push('}');
            }
            let _ = writeln!(out, " {}", number(*value));
        }
    }
}

/// A label value: backslash, double quote and line feed escaped (`\\`, `\"`, `\n`).
pub fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Help text: backslash and line feed escaped (a quote is itself there).
pub fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A sample value as the format spells it: `+Inf`, `-Inf`, `NaN`, else the shortest decimal
/// that reads back as the same number (`3`, `0.25`, `1e+21` is written out in full).
pub fn number(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_string()
    } else if value == f64::INFINITY {
        "+Inf".to_string()
    } else if value == f64::NEG_INFINITY {
        "-Inf".to_string()
    } else {
        format!("{value}")
    }
}
