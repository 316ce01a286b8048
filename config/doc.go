// Package config holds the server configuration (docs/protocol.md §9.1 and §11 "config").
//
// Invariants:
//   - Every key has a default in code (Default). The shipped sample
//     config.yaml is embedded in the binary and must parse to exactly
//     Default(); a test enforces it, so the two cannot drift.
//   - A YAML file may set any subset of the keys: keys it does not mention
//     keep their defaults. Unknown (e.g. misspelt) keys, keys present with no
//     value, and values of the wrong type are errors naming the dotted key.
//   - Load does not validate; callers run Validate, whose messages name the
//     offending key ("config: store.folderCount must be >= 1 (got 0)").
//   - Durations are stored as integers in the unit their key names (ms or
//     seconds, as in the original) and converted by the helper methods of
//     Config; Validate bounds them so the conversions cannot overflow.
//
// Resolution order of the file (Load): an explicit path, otherwise
// ./config/config.yaml relative to the working directory if it exists,
// otherwise the embedded defaults.
package config
