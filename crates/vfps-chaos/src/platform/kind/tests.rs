//! Tests of the kind driver against a simulated cluster.
