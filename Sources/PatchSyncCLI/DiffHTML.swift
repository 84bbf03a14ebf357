import Foundation
import PatchSync

/// The diff as one self-contained HTML page: no network, no external scripts or styles.
/// Charts are inline SVG (drawn without scripts); the file table sorts on a click.
enum DiffHTML {
    static func render(_ r: PatchDiff) -> String {
        let bundles = r.bundles.map { ($0.key, $0.value.downloadBytes) }.sorted { $0.1 > $1.1 }
        let folders = r.folders.map { ($0.key, $0.value) }.sorted { $0.1 > $1.1 }.prefix(12)
        return """
            <!DOCTYPE html>
            <html lang="en"><head><meta charset="utf-8">
            <title>Patch \(escape(r.old)) → \(escape(r.new))</title>
            <style>
            body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #111; }
            h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
            table { border-collapse: collapse; } th, td { padding: 4px 10px; border-bottom: 1px solid #ddd; }
            th { cursor: pointer; background: #f3f4f6; text-align: left; } td.n { text-align: right; }
            .charts { display: flex; gap: 40px; flex-wrap: wrap; }
            .within { color: #065f46; } .over { color: #b91c1c; }
            </style></head><body>
            <h1>Patch \(escape(r.old)) → \(escape(r.new))</h1>
            <p>Download <b>\(ByteCount.format(r.allDownloadBytes))</b> · written \(ByteCount.format(r.total.writtenBytes))
             · disk change \(ByteCount.format(r.total.diskDeltaBytes)) · files: \(r.total.filesAdded) added,
             \(r.total.filesRemoved) removed, \(r.total.filesChanged) changed, \(r.total.filesUnchanged) unchanged</p>
            <p>Bundles costed: \(escape(r.selection?.joined(separator: ", ") ?? "all"))</p>
            \(r.budget.map { "<p id=\"budget\" class=\"\($0.within ? "within" : "over")\"><b>\(escape($0.verdict))</b></p>" } ?? "")
            <div class="charts">
            <div><h2>Download per bundle</h2>\(chart(Array(bundles), id: "bundles"))</div>
            <div><h2>Download per folder</h2>\(chart(Array(folders), id: "folders"))</div>
            </div>
            <h2>Files added or changed</h2>
            <table id="files"><thead><tr><th>path</th><th>bundle</th><th>change</th><th>route</th><th>size</th>
            <th>reused</th><th>new</th><th>download</th></tr></thead><tbody>
            \(r.files.map(fileRow).joined(separator: "\n"))
            </tbody></table>
            <h2>Files removed (\(r.removed.count))</h2>
            <ul id="removed">\(r.removed.map { "<li>\(escape($0))</li>" }.joined())</ul>
            <script>
            document.querySelectorAll('#files th').forEach((th, col) => th.addEventListener('click', () => {
              const body = th.closest('table').tBodies[0];
              const rows = Array.from(body.rows);
              const asc = th.dataset.asc !== 'true'; th.dataset.asc = asc;
              const key = r => r.cells[col].dataset.v !== undefined ? Number(r.cells[col].dataset.v) : r.cells[col].textContent;
              rows.sort((a, b) => (key(a) > key(b) ? 1 : key(a) < key(b) ? -1 : 0) * (asc ? 1 : -1));
              rows.forEach(r => body.appendChild(r));
            }));
            </script>
            </body></html>
            """
    }

    /// A horizontal bar chart as inline SVG.
    private static func chart(_ items: [(String, Int64)], id: String) -> String {
        let maxValue = max(1, items.map(\.1).max() ?? 1)
        let rowHeight = 26, width = 520, label = 150
        var svg =
            "<svg id=\"\(id)\" xmlns=\"http://www.w3.org/2000/svg\" width=\"\(width)\" height=\"\(max(1, items.count) * rowHeight + 4)\">"
        for (i, (name, value)) in items.enumerated() {
            let y = i * rowHeight + 2
            let bar = max(2, Int(Double(width - label - 90) * Double(value) / Double(maxValue)))
            svg += "<text x=\"0\" y=\"\(y + 17)\" font-size=\"13\">\(escape(String(name.prefix(22))))</text>"
            svg += "<rect class=\"bar\" x=\"\(label)\" y=\"\(y + 3)\" width=\"\(bar)\" height=\"18\" fill=\"#2563eb\"/>"
            svg += "<text x=\"\(label + bar + 6)\" y=\"\(y + 17)\" font-size=\"12\">\(ByteCount.format(value))</text>"
        }
        return svg + "</svg>"
    }

    private static func fileRow(_ f: PatchDiff.FileCost) -> String {
        func n(_ v: Int64) -> String { "<td class=\"n\" data-v=\"\(v)\">\(ByteCount.format(v))</td>" }
        return
            "<tr><td>\(escape(f.path))</td><td>\(escape(f.bundle))</td><td>\(f.change.rawValue)</td><td>\(f.route.rawValue)</td>"
            + n(f.size) + n(f.reusedBytes) + n(f.newBytes) + n(f.downloadBytes) + "</tr>"
    }

    private static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }
}
