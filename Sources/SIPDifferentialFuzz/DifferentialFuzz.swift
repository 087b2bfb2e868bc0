// libFuzzer harness: the same bytes as a UDP datagram and as a TCP stream must get the same
// verdict (SIPDifferentialCheck). Built only with ROUSE_FUZZ=1 (see Package.swift):
//   ROUSE_FUZZ=1 swift build --scratch-path /tmp/rouse-fuzz -c release --product SIPDifferentialFuzz \
//     --sanitize=fuzzer -Xswiftc -parse-as-library
// Run: SWIFT_BACKTRACE=enable=no /tmp/rouse-fuzz/release/SIPDifferentialFuzz -max_total_time=60 \
//   -artifact_prefix=fuzz-artifacts/ Tests/Fuzz/sip-differential-corpus   (or scripts/fuzz.sh)
// A crash input found here belongs in Tests/Fuzz/sip-differential-corpus, which `make test` replays.
import SIPDifferential
import SIPMessage

/// Traps on any disagreement between the datagram parser and the stream framer + parser.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let limits = SIPParserLimits(maxMessageBytes: 8_192, maxHeaderCount: 64, maxLineBytes: 1_024)
    if let disagreement = SIPDifferentialCheck.disagreement(in: bytes, limits: limits) {
        fatalError(disagreement)
    }
    return 0
}
