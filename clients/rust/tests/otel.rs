//! OpenTelemetry spans of the worker runtime (filled in by the next commit).
