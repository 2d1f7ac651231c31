//! (being written: plan → Cranelift → position-independent x86-64 walker bytes)
