// core/svg_chart: a line chart as a standalone SVG document, with no dependencies: series of (x, y) points drawn as
// polylines (with markers where there are few points), axes with six ticks and grid lines, axis labels, a legend.
// What `tiertrain plan --sweep-budget` (perf/sweep.h) and `tiertrain plot` (the loss curves of a run) draw.
//
//   LineChart c{.title = "loss", .x_label = "step", .y_label = "loss"};
//   c.series.push_back({.name = "train", .points = {{1, 5.5}, {100, 2.1}}});
//   TT_TRY(write_file_atomically("loss.svg", render_svg(c)));
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tt {

struct ChartSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // drawn in this order
  bool emphasis = false;  // drawn black and thicker (the automatic plan of a sweep)
};

struct LineChart {
  std::string title, x_label, y_label;
  std::vector<ChartSeries> series;
  bool y_from_zero = true;            // false: the y axis spans the data (loss curves)
  const char* x_format = "%.1f";      // tick labels
  const char* y_format = "%.0f";
};

// The chart as SVG text; a chart without points draws its axes and legend only. Text is XML-escaped.
std::string render_svg(const LineChart& chart);

}  // namespace tt
