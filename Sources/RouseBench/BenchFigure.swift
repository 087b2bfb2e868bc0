import Foundation

/// One measured figure of `make bench`: what was measured, its value and unit.
struct BenchFigure: Sendable {
    var name: String
    var value: Double
    var unit: String
}

/// Prints a line and flushes it, so progress shows at once even when standard output is a pipe.
func progress(_ line: String) {
    print(line)
    fflush(nil)
}
