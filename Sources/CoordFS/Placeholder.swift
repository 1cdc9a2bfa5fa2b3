// CoordFS
