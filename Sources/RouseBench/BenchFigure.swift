/// One measured figure of `make bench`: what was measured, its value and unit.
struct BenchFigure: Sendable {
    var name: String
    var value: Double
    var unit: String
}
