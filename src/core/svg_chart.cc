#include "core/svg_chart.h"

#include <algorithm>
#include <cmath>

#include "core/status.h"

namespace tt {

namespace {
std::string xml(const std::string& s) {
  std::string r;
  for (char ch : s) {
    switch (ch) {
      case '<': r += "&lt;"; break;
      case '>': r += "&gt;"; break;
      case '&': r += "&amp;"; break;
      case '"': r += "&quot;"; break;
      default: r += ch;
    }
  }
  return r;
}
}  // namespace

std::string render_svg(const LineChart& c) {
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const ChartSeries& s : c.series)
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  if (x0 > x1) x0 = 0, x1 = 1, y0 = 0, y1 = 1;  // no points
  if (x1 <= x0) x1 = x0 + 1;
  if (c.y_from_zero) y0 = std::min(0.0, y0);
  const double pad = (y1 > y0 ? y1 - y0 : std::max(1.0, std::fabs(y1))) * 0.06;
  y1 += pad;
  if (!c.y_from_zero) y0 -= pad;
  const double W = 900, H = 520, L = 70, R = 290, T = 40, B = 50;
  auto sx = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto sy = [&](double y) { return H - B - (y - y0) / (y1 - y0) * (H - T - B); };
  const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                          "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939"};
  std::string svg = str_format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      W, H);
  svg += str_format("<text x=\"%.0f\" y=\"22\" font-size=\"14\">%s</text>\n", L, xml(c.title).c_str());
  svg += str_format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", L, H - B, W - R, H - B);
  svg += str_format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", L, T, L, H - B);
  for (int i = 0; i <= 5; ++i) {
    const double x = x0 + (x1 - x0) * i / 5, y = y0 + (y1 - y0) * i / 5;
    svg += str_format("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", sx(x), H - B + 18) +
           str_format(c.x_format, x) + "</text>\n";
    svg += str_format("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">", L - 6, sy(y) + 4) + str_format(c.y_format, y) +
           "</text>\n";
    svg += str_format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, sy(y), W - R, sy(y));
  }
  svg += str_format("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", (L + W - R) / 2, H - 12,
                    xml(c.x_label).c_str());
  svg += str_format("<text x=\"16\" y=\"%.1f\" transform=\"rotate(-90 16 %.1f)\" text-anchor=\"middle\">%s</text>\n",
                    (T + H - B) / 2, (T + H - B) / 2, xml(c.y_label).c_str());
  int k = 0;
  for (const ChartSeries& s : c.series) {
    const char* col = s.emphasis ? "#000000" : colors[k % 12];
    std::string d;
    for (const auto& [x, y] : s.points)
      if (std::isfinite(x) && std::isfinite(y)) d += str_format("%s%.1f,%.1f", d.empty() ? "" : " ", sx(x), sy(y));
    svg += str_format("<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" points=\"%s\"/>\n", col,
                      s.emphasis ? "3" : "1.5", d.c_str());
    if (s.points.size() <= 60)
      for (const auto& [x, y] : s.points)
        if (std::isfinite(x) && std::isfinite(y))
          svg += str_format("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n", sx(x), sy(y), col);
    const double ly = T + 14 + 16 * k;
    svg += str_format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>\n",
                      W - R + 12, ly - 4, W - R + 32, ly - 4, col);
    svg += str_format("<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", W - R + 38, ly, xml(s.name).c_str());
    ++k;
  }
  return svg + "</svg>\n";
}

}  // namespace tt
