import Foundation

/// Prints figures as an aligned table and writes them as JSON.
enum FigureReport {
    static func table(_ figures: [BenchFigure]) -> String {
        let nameWidth = max(figures.map(\.name.count).max() ?? 0, 6)
        let values = figures.map { format($0.value) }
        let valueWidth = max(values.map(\.count).max() ?? 0, 5)
        var lines = [pad("figure", nameWidth) + "  " + padLeft("value", valueWidth) + "  unit"]
        lines.append(String(repeating: "-", count: nameWidth + valueWidth + 8))
        for (figure, value) in zip(figures, values) {
            lines.append(pad(figure.name, nameWidth) + "  " + padLeft(value, valueWidth) + "  " + figure.unit)
        }
        return lines.joined(separator: "\n")
    }

    /// `{"seconds": …, "figures": [{"name": …, "value": …, "unit": …}, …]}`; a figure that is
    /// not a finite number is left out.
    static func writeJSON(_ figures: [BenchFigure], seconds: Double, to path: String) throws {
        let entries: [[String: Any]] = figures.filter(\.value.isFinite).map {
            ["name": $0.name, "value": $0.value, "unit": $0.unit]
        }
        let document: [String: Any] = ["seconds": seconds, "figures": entries]
        let data = try JSONSerialization.data(withJSONObject: document, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])
        try data.write(to: URL(fileURLWithPath: path), options: .atomic)
    }

    /// Whole numbers from 100 up with thousands separators, smaller ones with one or two decimals.
    static func format(_ value: Double) -> String {
        guard value.isFinite else { return "-" }
        if value.magnitude >= 100 || value == value.rounded() {
            let digits = String(Int64(value.rounded()).magnitude)
            var grouped = ""
            for (offset, digit) in digits.enumerated() {
                if offset > 0 && (digits.count - offset) % 3 == 0 { grouped.append(",") }
                grouped.append(digit)
            }
            return (value < 0 ? "-" : "") + grouped
        }
        return String(format: value.magnitude >= 10 ? "%.1f" : "%.2f", value)
    }

    private static func pad(_ text: String, _ width: Int) -> String {
        text + String(repeating: " ", count: max(width - text.count, 0))
    }

    private static func padLeft(_ text: String, _ width: Int) -> String {
        String(repeating: " ", count: max(width - text.count, 0)) + text
    }
}
