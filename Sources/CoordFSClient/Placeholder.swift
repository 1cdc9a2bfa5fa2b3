// CoordFSClient
